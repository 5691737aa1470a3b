"""Shipping service: schedules a shipment when stock allows, else reports the failure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Query
from pydantic import BaseModel
from sqlalchemy import (
    JSON,
    CheckConstraint,
    Column,
    DateTime,
    Engine,
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
from sqlalchemy.dialects.postgresql import insert as pg_insert

from inbox import BatchHandler
from outbox import unnested, unnested_rows
from outboxkit.kernel.envelope import Envelope
from outboxkit_workshop.saga import rules
from outboxkit_workshop.saga.common import migrations_of, publish_replies, settings_of
from outboxkit_workshop.saga.contracts import CONTRACTS
from outboxkit_workshop.saga.rules import ORDER_ID
from service_template import UnitOfWork, create_app, unit_of_work
from service_template.app import service_router

metadata = MetaData()
stock = Table(
    "stock",
    metadata,
    Column("sku", String(32), primary_key=True),
    Column("available", Integer, nullable=False),
    CheckConstraint("available >= 0", name="ck_stock_not_negative"),
)
shipments = Table(
    "shipments",
    metadata,
    Column("order_id", String(36), primary_key=True),
    Column("status", String(16), nullable=False),
    Column("reason", Text, nullable=False),
    Column("items", JSON, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)
SCHEDULED, FAILED = rules.SCHEDULED, rules.FAILED  # shipment statuses


class ShipmentView(BaseModel):
    order_id: str
    status: str
    reason: str
    items: Any
    created_at: Any


router = service_router(tags=["shipping"])


@router.get("/shipments", response_model=list[ShipmentView], summary="shipments of an order")
def list_shipments(
    uow: Annotated[UnitOfWork, Depends(unit_of_work)],
    order_id: Annotated[str, Query(pattern=ORDER_ID)],
) -> Any:
    rows = uow.session.execute(select(shipments).where(shipments.c.order_id == order_id))
    return [dict(r) for r in rows.mappings()]


def set_stock(engine: Engine, levels: Mapping[str, int], *, overwrite: bool = True) -> None:
    """Set the available quantity of each SKU (operators' restock); ``overwrite=False`` only
    adds the SKUs not stocked yet (set-up run again on a live system keeps its levels)."""
    with engine.begin() as conn:
        for sku, available in levels.items():
            insert = pg_insert(stock).values(sku=sku, available=available)
            conn.execute(
                insert.on_conflict_do_update(index_elements=["sku"], set_={"available": available})
                if overwrite
                else insert.on_conflict_do_nothing(index_elements=["sku"])
            )


def apply_slice(events: Sequence[Envelope], uow: UnitOfWork) -> None:
    """Apply a partition's payment events: lock the stock of every SKU they want, reserve in
    offset order against the stock as it goes, write the stock and the shipments at once."""
    refunded = sorted({rules.order_of(e) for e in events if e.event_type == rules.PAYMENT_REFUNDED})
    known = _shipments(uow, refunded) if refunded else {}
    skus = rules.skus_wanted(events, known.values())
    done = rules.reserve_stock(_locked(uow, skus) if skus else {}, events, known)
    if done.taken:
        uow.session.execute(_TAKE, unnested_rows(_RESERVED, sorted(done.taken.items())))
    if done.shipments:
        uow.session.execute(insert(shipments), [asdict(s) for s in done.shipments])
    if done.cancelled:
        rows = ((s.order_id, s.status, s.reason) for s in done.cancelled)
        uow.session.execute(_CANCEL, unnested_rows(_CANCELLED, rows))
    publish_replies(uow, done.replies)


def _shipments(uow: UnitOfWork, order_ids: Sequence[str]) -> dict[str, rules.Shipment]:
    """The shipments of ``order_ids``, locked in order id order."""
    rows = uow.session.execute(
        select(shipments.c.order_id, shipments.c.status, shipments.c.reason, shipments.c["items"])
        .where(shipments.c.order_id.in_(order_ids))
        .order_by(shipments.c.order_id)
        .with_for_update()
    ).all()
    return {r.order_id: rules.Shipment(r.order_id, r.status, r.reason, r[3]) for r in rows}


def _locked(uow: UnitOfWork, skus: Sequence[str]) -> dict[str, int]:
    """The stock of ``skus``, rows locked in SKU order (no deadlock between partitions)."""
    rows = uow.session.execute(
        select(stock.c.sku, stock.c.available)
        .where(stock.c.sku.in_(skus))
        .order_by(stock.c.sku)
        .with_for_update()
    ).all()
    return {sku: available for sku, available in rows}


_CANCELLED = unnested("cancelled", order_id=String(), status=String(), reason=Text())
_CANCEL = (
    update(shipments)
    .where(shipments.c.order_id == _CANCELLED.c.order_id)
    .values(status=_CANCELLED.c.status, reason=_CANCELLED.c.reason)
)
_RESERVED = unnested("reserved", sku=String(), qty=Integer())
_TAKE = (
    update(stock)
    .where(stock.c.sku == _RESERVED.c.sku)
    .values(available=stock.c.available - _RESERVED.c.qty)
)


HANDLERS = BatchHandler(
    apply_slice,
    frozenset({rules.PAYMENT_CAPTURED, rules.PAYMENT_DECLINED, rules.PAYMENT_REFUNDED}),
    CONTRACTS.problem,
)


def app() -> FastAPI:
    """The shipping service (settings from SHIPPING_* environment variables)."""
    return create_app(
        settings_of("shipping"),
        routers=[router],
        migrations=[migrations_of("shipping")],
        title="shipping",
        description="Schedules shipments when stock allows.",
    )
