"""Orders service: POST /orders, GET /orders/{id}; its consumer follows payments and shipments."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Path, Request
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Identity,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    case,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncSession

from inbox import BatchHandler
from outbox import unnested, unnested_rows
from outbox.scheduled import due_of
from outboxkit.kernel.envelope import Envelope
from outboxkit_workshop.saga import rules
from outboxkit_workshop.saga.common import SagaServiceSettings, migrations_of, settings_of
from outboxkit_workshop.saga.contracts import (
    CONTRACTS,
    MAX_ITEMS,
    Amount,
    Customer,
    Item,
    OrderCancelled,
    OrderPlaced,
    PaymentTimedOut,
    Quantity,
    ShippingTimedOut,
    Sku,
)
from outboxkit_workshop.saga.order_metrics import OrdersCollector
from outboxkit_workshop.saga.rules import ORDER_ID
from service_template import (
    AsyncUnitOfWork,
    IdempotencyKey,
    Problem,
    UnitOfWork,
    async_service_router,
    async_unit_of_work,
    create_app,
    idempotent_async,
)
from service_template.openapi import problems

metadata = MetaData()
orders = Table(
    "orders",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("customer", String(64), nullable=False),
    Column("items", JSONB, nullable=False),
    Column("amount", Integer, nullable=False),
    Column("status", String(16), nullable=False, index=True),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("final_at", DateTime(timezone=True), nullable=True),
)
timeline = Table(
    "order_timeline",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("order_id", String(36), nullable=False),
    Column("event_id", String(64), nullable=False, unique=True),
    Column("event_type", String(64), nullable=False),
    Column("service", String(32), nullable=False),
    Column("status_after", String(16), nullable=False),
    Column("detail", JSONB, nullable=True),
    Column("at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Index("ix_order_timeline_order", "order_id"),
)


def _whole(value: Any) -> Any:
    """A JSON number with no fraction is an integer (JSON Schema's rule): ``24.0`` is 24."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


class OrderLine(BaseModel):
    """An order line as the API takes it: `Item`, with a whole-number float as an integer."""

    model_config = ConfigDict(extra="forbid", strict=True)
    sku: Sku
    qty: Annotated[Quantity, BeforeValidator(_whole)]


class PlaceOrder(BaseModel):
    # Strict: `true` is no amount and "5" no quantity (a 422, never coerced); 5.0 is 5, as
    # JSON Schema says of the document's integers.
    model_config = ConfigDict(extra="forbid", strict=True)
    customer: Customer
    items: list[OrderLine] = Field(min_length=1, max_length=MAX_ITEMS)
    amount: Annotated[Amount, BeforeValidator(_whole)]


class TimelineEntry(BaseModel):
    event_type: str
    service: str
    status_after: str
    at: Any
    detail: Any = None


class OrderView(BaseModel):
    id: str
    customer: str
    items: list[Item]
    amount: int
    status: str
    created_at: Any
    final_at: Any = None
    timeline: list[TimelineEntry] = []


# Built once (SQLAlchemy's per-statement construction costs more CPU than the round trip).
PLACE_ROW = insert(orders).returning(orders.c.created_at)
ENTER_TIMELINE = insert(timeline).returning(timeline.c.at)

# The routes are async def, on an AsyncSession (the consumer's handlers stay synchronous): the
# saga runs one async service, so its demo, fault campaigns and soak prove that path.
router = async_service_router(tags=["orders"])
UoW = Annotated[AsyncUnitOfWork, Depends(async_unit_of_work)]


def order_query(order_id: str) -> tuple[Any, Any]:
    """The statements of an order's view: its row, and its timeline in order."""
    row = select(orders).where(orders.c.id == order_id)
    history = (
        select(
            timeline.c.event_type,
            timeline.c.service,
            timeline.c.status_after,
            timeline.c.at,
            timeline.c.detail,
        )
        .where(timeline.c.order_id == order_id)
        .order_by(timeline.c.at, timeline.c.id)
    )
    return row, history


async def _view(session: AsyncSession, order_id: str) -> dict[str, Any] | None:
    order, history = order_query(order_id)
    row = (await session.execute(order)).mappings().first()
    if row is None:
        return None
    events = (await session.execute(history)).mappings().all()
    return {**row, "timeline": [dict(e) for e in events]}


@dataclass(frozen=True)
class NewOrder:
    """What placing an order writes, decided before any I/O: the order's row, its timeline
    entry, its event and its payment timer (scheduled in the same transaction, so an order
    never exists without it)."""

    placed: dict[str, Any]
    entry: dict[str, Any]
    event: OrderPlaced
    timer: PaymentTimedOut
    timer_key: str

    @classmethod
    def of(cls, body: PlaceOrder, request: Request) -> NewOrder:
        order_id = str(uuid.uuid4())
        items = [Item(sku=line.sku, qty=line.qty) for line in body.items]
        placed: dict[str, Any] = {
            "id": order_id,
            "customer": body.customer,
            "items": [i.model_dump() for i in items],
            "amount": body.amount,
            "status": rules.PENDING,
        }
        entry: dict[str, Any] = {
            "order_id": order_id,
            "event_id": str(uuid.uuid4()),
            "event_type": rules.ORDER_PLACED,
            "service": "orders",
            "status_after": rules.PENDING,
        }
        # (an app of the router on plain ServiceSettings, as tests build, takes the default)
        settings = request.app.state.service.settings
        seconds = getattr(settings, "payment_timeout_seconds", Timeouts.payment)
        return cls(
            placed,
            entry,
            OrderPlaced(order_id=order_id, customer=body.customer, items=items, amount=body.amount),
            PaymentTimedOut(order_id=order_id, seconds=seconds),
            rules.timer_key(rules.PAYMENT_TIMED_OUT, order_id),
        )

    def answer(self, created_at: Any, at: Any) -> tuple[int, Any]:
        """The 201 and the view GET /orders/{id} would read now (no second read)."""
        timeline = [TimelineEntry(**self.entry, at=at)]
        view = OrderView(**self.placed, created_at=created_at, timeline=timeline)
        return 201, view.model_dump(mode="json")


PLACE_ORDER: dict[str, Any] = {
    "status_code": 201,
    "response_model": OrderView,
    "summary": "place an order (PENDING) and emit OrderPlaced",
    "responses": problems(400, 409),
}


@router.post("/orders", **PLACE_ORDER)
async def place_order(
    body: PlaceOrder,
    request: Request,
    uow: UoW,
    idempotency_key: IdempotencyKey = None,
) -> Any:
    async def create() -> tuple[int, Any]:
        new = NewOrder.of(body, request)
        created_at = (await uow.session.execute(PLACE_ROW, new.placed)).scalar_one()
        at = (await uow.session.execute(ENTER_TIMELINE, new.entry)).scalar_one()
        await uow.publish_event(new.event)
        await uow.schedule_event(new.timer, delay=new.timer.seconds, key=new.timer_key)
        return new.answer(created_at, at)

    body_json = body.model_dump(mode="json")
    return await idempotent_async(uow, request, idempotency_key, body_json, create)


GET_ORDER: dict[str, Any] = {
    "response_model": OrderView,
    "summary": "an order's status and the timeline of events that touched it",
    "responses": problems(404),
}


@router.get("/orders/{order_id}", **GET_ORDER)
async def get_order(order_id: Annotated[str, Path(pattern=ORDER_ID)], uow: UoW) -> Any:
    view = await _view(uow.session, order_id)
    if view is None:
        raise Problem(404, f"order {order_id} not found")
    return view


# -- consumer: payment and shipment events move the order ----------------------------------


@dataclass(frozen=True)
class Timeouts:
    """How long an order waits for each step before it is cancelled, in seconds."""

    payment: float = 120.0
    shipping: float = 120.0


def apply_slice(
    events: Sequence[Envelope], uow: UnitOfWork, timeouts: Timeouts = Timeouts()
) -> None:
    """Apply a partition's payment, shipment and timer events to their orders: lock the orders,
    fold the events in offset order, write the moves and the timeline in one statement each;
    then the timers: a paid order gets its shipping timer (its payment timer cancelled), an
    order made final has its pending timers cancelled, and one cancelled by a timer is
    announced (`OrderCancelled`) so that its payment is refunded, however late it comes."""
    ids = sorted({rules.order_of(e) for e in events})
    rows = uow.session.execute(
        select(orders.c.id, orders.c.status)
        .where(orders.c.id.in_(ids))
        .order_by(orders.c.id)  # rows locked in id order: no deadlock between partitions
        .with_for_update()
    ).all()
    moves = rules.follow_orders({r.id: r.status for r in rows}, events)
    if moves.statuses:
        uow.session.execute(_MOVE, unnested_rows(_MOVED, moves.statuses.items()))
    if moves.timeline:
        uow.session.execute(insert(timeline), [_entry(e, s) for e, s in moves.timeline])
    _timers(uow, moves, timeouts)


def _timers(uow: UnitOfWork, moves: rules.OrderMoves, timeouts: Timeouts) -> None:
    done = [rules.timer_key(t, o) for o in moves.finished for t in rules.TIMERS]
    done += [rules.timer_key(rules.PAYMENT_TIMED_OUT, rules.order_of(e)) for e in moves.paid]
    if done:
        uow.cancel_scheduled(*done)
    if moves.paid:
        uow.schedule_many(
            [
                ShippingTimedOut(order_id=rules.order_of(e), seconds=timeouts.shipping).new_event(
                    caused_by=e
                )
                for e in moves.paid
            ],
            [
                due_of(None, timeouts.shipping, rules.timer_key(rules.SHIPPING_TIMED_OUT, o))
                for o in (rules.order_of(e) for e in moves.paid)
            ],
        )
    if moves.timed_out:
        uow.publish_many(
            [
                OrderCancelled(order_id=rules.order_of(e), reason=_timed_out(e)).new_event(
                    caused_by=e
                )
                for e in moves.timed_out
            ]
        )


def _timed_out(timer: Envelope) -> str:
    step = "payment" if timer.event_type == rules.PAYMENT_TIMED_OUT else "shipping"
    return f"{step} timed out after {timer.payload['seconds']:g} s"


_MOVED = unnested("moved", id=String(), status=String())
_MOVE = (
    update(orders)
    .where(orders.c.id == _MOVED.c.id)
    .values(
        status=_MOVED.c.status,
        final_at=case((_MOVED.c.status.in_(rules.FINAL), func.now()), else_=orders.c.final_at),
    )
)


_SERVICE_OF = {rules.PAYMENT: "payments", rules.SHIPMENT: "shipping", rules.TIMEOUT: "orders"}


def _entry(event: Envelope, status_after: str) -> dict[str, Any]:
    return {
        "order_id": rules.order_of(event),
        "event_id": str(event.event_id),
        "event_type": event.event_type,
        "service": _SERVICE_OF[event.aggregate_type],
        "status_after": status_after,
        "detail": {"reason": event.payload.get("reason")},
    }


def handlers_for(timeouts: Timeouts) -> BatchHandler:
    """The orders consumer's handler, with these timeouts."""
    apply = functools.partial(apply_slice, timeouts=timeouts)
    return BatchHandler(apply, frozenset(rules.ORDER_MOVES), CONTRACTS.problem)


def handlers(settings: SagaServiceSettings) -> BatchHandler:
    """The orders consumer's handler, with the timeouts of the service's settings."""
    timeouts = Timeouts(settings.payment_timeout_seconds, settings.shipping_timeout_seconds)
    return handlers_for(timeouts)


HANDLERS = handlers_for(Timeouts())


def app() -> FastAPI:
    """The orders service (settings from ORDERS_* environment variables)."""
    settings = settings_of("orders")
    if settings.http_routes == "sync":  # the service benchmark's synchronous side
        from outboxkit_workshop.saga.orders_sync import router as routes
    else:
        routes = router
    service = create_app(
        settings,
        routers=[routes],
        migrations=[migrations_of("orders")],
        title="orders",
        description="Places orders and follows them to a final state.",
    )
    plumbing = service.state.service
    plumbing.metrics.registry.register(OrdersCollector(plumbing.engine, orders))
    return service
