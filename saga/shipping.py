"""Shipping service: schedules a shipment when stock allows, else reports the failure."""

from __future__ import annotations

from collections.abc import Mapping
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

from outbox.envelope import Envelope
from saga import rules
from saga.common import migrations_of, settings_of
from saga.payments import ignore
from saga.rules import ORDER_ID
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
SCHEDULED, FAILED = "SCHEDULED", "FAILED"


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


def set_stock(engine: Engine, levels: Mapping[str, int]) -> None:
    """Set the available quantity of each SKU (operators' restock; the demo's set-up)."""
    with engine.begin() as conn:
        for sku, available in levels.items():
            conn.execute(
                pg_insert(stock)
                .values(sku=sku, available=available)
                .on_conflict_do_update(index_elements=["sku"], set_={"available": available})
            )


def on_payment_captured(event: Envelope, uow: UnitOfWork) -> None:
    """Reserve every item or none (rows locked in SKU order: no deadlock between orders)."""
    p = event.payload
    order_id = str(p["order_id"])
    wanted: dict[str, int] = {}
    for item in p["items"]:
        wanted[item["sku"]] = wanted.get(item["sku"], 0) + int(item["qty"])
    rows = uow.session.execute(
        select(stock.c.sku, stock.c.available)
        .where(stock.c.sku.in_(sorted(wanted)))
        .order_by(stock.c.sku)
        .with_for_update()
    ).all()
    available = {sku: qty for sku, qty in rows}
    short = [sku for sku, qty in sorted(wanted.items()) if available.get(sku, 0) < qty]
    if short:
        status, reason, event_type = (
            FAILED,
            f"out of stock: {', '.join(short)}",
            rules.SHIPMENT_FAILED,
        )
    else:
        for sku, qty in wanted.items():
            uow.session.execute(
                update(stock).where(stock.c.sku == sku).values(available=stock.c.available - qty)
            )
        status, reason, event_type = SCHEDULED, "reserved", rules.SHIPMENT_SCHEDULED
    uow.session.execute(
        insert(shipments).values(order_id=order_id, status=status, reason=reason, items=p["items"])
    )
    uow.publish(
        aggregate_type=rules.SHIPMENT,
        aggregate_id=order_id,
        event_type=event_type,
        payload={"order_id": order_id, "reason": reason},
    )


HANDLERS = {
    rules.PAYMENT_CAPTURED: on_payment_captured,
    rules.PAYMENT_DECLINED: ignore,
    rules.PAYMENT_REFUNDED: ignore,
}


def app() -> FastAPI:
    """The shipping service (settings from SHIPPING_* environment variables)."""
    return create_app(
        settings_of("shipping"),
        routers=[router],
        migrations=[migrations_of("shipping")],
        title="shipping",
        description="Schedules shipments when stock allows.",
    )
