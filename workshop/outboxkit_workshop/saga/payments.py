"""Payments service: captures or declines each order, refunds when shipping fails."""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Query
from pydantic import BaseModel
from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Identity,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    func,
    insert,
    select,
    update,
)

from inbox import BatchHandler, RetryLater
from outbox import unnested, unnested_rows
from outboxkit.kernel.envelope import Envelope
from outboxkit_workshop.saga import rules
from outboxkit_workshop.saga.common import (
    SagaServiceSettings,
    migrations_of,
    publish_replies,
    settings_of,
)
from outboxkit_workshop.saga.contracts import CONTRACTS
from outboxkit_workshop.saga.rules import ORDER_ID
from service_template import UnitOfWork, create_app, unit_of_work
from service_template.app import service_router

metadata = MetaData()
payments = Table(
    "payments",
    metadata,
    Column("order_id", String(36), primary_key=True),
    Column("customer", String(64), nullable=False),
    Column("amount", Integer, nullable=False),
    Column("status", String(16), nullable=False),
    Column("reason", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)
payment_log = Table(
    "payment_log",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("order_id", String(36), nullable=False, index=True),
    Column("action", String(16), nullable=False),
    Column("event_id", String(64), nullable=False),
    Column("at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)
CAPTURED, DECLINED, REFUNDED = rules.CAPTURED, rules.DECLINED, rules.REFUNDED  # statuses


class PaymentView(BaseModel):
    order_id: str
    customer: str
    amount: int
    status: str
    reason: str
    created_at: Any
    updated_at: Any


router = service_router(tags=["payments"])


@router.get("/payments", response_model=list[PaymentView], summary="payments of an order")
def list_payments(
    uow: Annotated[UnitOfWork, Depends(unit_of_work)],
    order_id: Annotated[str, Query(pattern=ORDER_ID)],
) -> Any:
    rows = uow.session.execute(select(payments).where(payments.c.order_id == order_id))
    return [dict(r) for r in rows.mappings()]


def apply_slice(events: Sequence[Envelope], uow: UnitOfWork, slow_gateway: float = 0.0) -> None:
    """Apply a partition's order and shipment events to the payments: lock the payments the
    refunds read, fold the events in offset order, write each kind of change in one statement.

    A `slow-` customer's card gateway answers ``slow_gateway`` seconds after the order was
    placed: until then the slice raises `RetryLater`, the inbox applies it event by event, and
    that order's events wait for their delayed retry while the others go on."""
    wait = rules.gateway_wait(events, slow_gateway, time.time()) if slow_gateway else 0.0
    if wait > 0:
        raise RetryLater(f"the card gateway answers in {wait:.1f} s", after=wait)
    refunds = {rules.order_of(e) for e in events if e.event_type in _REFUNDING}
    done = rules.settle_payments(_locked(uow, refunds) if refunds else {}, events)
    if done.created:
        rows = [asdict(p) for p in done.created.values()]
        uow.session.execute(insert(payments), rows)
    if done.changed:
        changed = ((p.order_id, p.status, p.reason) for p in done.changed.values())
        uow.session.execute(_CHANGE, unnested_rows(_REFUNDED, changed))
    if done.log:
        log = [{"order_id": o, "action": a, "event_id": str(e.event_id)} for o, a, e in done.log]
        uow.session.execute(insert(payment_log), log)
    publish_replies(uow, done.replies)


def _locked(uow: UnitOfWork, order_ids: Iterable[str]) -> dict[str, rules.Payment]:
    rows = uow.session.execute(
        select(
            payments.c.order_id,
            payments.c.customer,
            payments.c.amount,
            payments.c.status,
            payments.c.reason,
        )
        .where(payments.c.order_id.in_(sorted(order_ids)))
        .order_by(payments.c.order_id)
        .with_for_update()
    ).all()
    return {
        r.order_id: rules.Payment(r.order_id, r.customer, r.amount, r.status, r.reason)
        for r in rows
    }


_REFUNDED = unnested("refunded", order_id=String(), status=String(), reason=Text())
_CHANGE = (
    update(payments)
    .where(payments.c.order_id == _REFUNDED.c.order_id)
    .values(status=_REFUNDED.c.status, reason=_REFUNDED.c.reason, updated_at=func.now())
)


_REFUNDING = (rules.SHIPMENT_FAILED, rules.ORDER_CANCELLED)  # events that may refund a capture


def handlers_for(slow_gateway: float) -> BatchHandler:
    """The payments consumer's handler, its `slow-` customers' gateway answering that late."""
    return BatchHandler(
        functools.partial(apply_slice, slow_gateway=slow_gateway), TYPES, CONTRACTS.problem
    )


def handlers(settings: SagaServiceSettings) -> BatchHandler:
    """The payments consumer's handler, as the service's settings describe it."""
    return handlers_for(settings.slow_gateway_seconds)


TYPES = frozenset(
    {
        rules.ORDER_PLACED,
        rules.ORDER_CANCELLED,
        rules.SHIPMENT_FAILED,
        rules.SHIPMENT_SCHEDULED,
        rules.SHIPMENT_CANCELLED,
    }
)
HANDLERS = handlers_for(0.0)


def app() -> FastAPI:
    """The payments service (settings from PAYMENTS_* environment variables)."""
    return create_app(
        settings_of("payments"),
        routers=[router],
        migrations=[migrations_of("payments")],
        title="payments",
        description="Captures or declines order payments; refunds on failure.",
    )
