"""Payments service: captures or declines each order, refunds when shipping fails."""

from __future__ import annotations

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

from outbox.envelope import Envelope
from saga import rules
from saga.common import migrations_of, settings_of
from saga.rules import ORDER_ID
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
CAPTURED, DECLINED, REFUNDED = "CAPTURED", "DECLINED", "REFUNDED"


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


def _log(uow: UnitOfWork, order_id: str, action: str, event: Envelope) -> None:
    uow.session.execute(
        insert(payment_log).values(order_id=order_id, action=action, event_id=str(event.event_id))
    )


def on_order_placed(event: Envelope, uow: UnitOfWork) -> None:
    """Capture or decline by the credit-limit rule; tell the others through our outbox."""
    p = event.payload
    order_id, customer, amount = str(p["order_id"]), str(p["customer"]), int(p["amount"])
    captured, reason = rules.payment_decision(customer, amount)
    status = CAPTURED if captured else DECLINED
    uow.session.execute(
        insert(payments).values(
            order_id=order_id, customer=customer, amount=amount, status=status, reason=reason
        )
    )
    _log(uow, order_id, status.lower(), event)
    uow.publish(
        aggregate_type=rules.PAYMENT,
        aggregate_id=order_id,
        event_type=rules.PAYMENT_CAPTURED if captured else rules.PAYMENT_DECLINED,
        payload={
            "order_id": order_id,
            "customer": customer,
            "amount": amount,
            "items": p["items"],
            "reason": reason,
        },
    )


def on_shipment_failed(event: Envelope, uow: UnitOfWork) -> None:
    """Compensation: refund the captured payment."""
    order_id = str(event.payload["order_id"])
    row = uow.session.execute(
        select(payments.c.status, payments.c.amount)
        .where(payments.c.order_id == order_id)
        .with_for_update()
    ).first()
    if row is None or row.status != CAPTURED:
        raise ValueError(f"refund for order {order_id}: payment is {row and row.status}")
    uow.session.execute(
        update(payments)
        .where(payments.c.order_id == order_id)
        .values(
            status=REFUNDED,
            reason=f"refunded: {event.payload.get('reason')}",
            updated_at=func.now(),
        )
    )
    _log(uow, order_id, "refunded", event)
    uow.publish(
        aggregate_type=rules.PAYMENT,
        aggregate_id=order_id,
        event_type=rules.PAYMENT_REFUNDED,
        payload={"order_id": order_id, "amount": row.amount, "reason": event.payload.get("reason")},
    )


def ignore(event: Envelope, uow: UnitOfWork) -> None:
    """An event this consumer reads but has nothing to do for."""


HANDLERS = {
    rules.ORDER_PLACED: on_order_placed,
    rules.SHIPMENT_FAILED: on_shipment_failed,
    rules.SHIPMENT_SCHEDULED: ignore,
}


def app() -> FastAPI:
    """The payments service (settings from PAYMENTS_* environment variables)."""
    return create_app(
        settings_of("payments"),
        routers=[router],
        migrations=[migrations_of("payments")],
        title="payments",
        description="Captures or declines order payments; refunds on failure.",
    )
