"""The orders service's routes written synchronously (a Session, `idempotent`): the same
answers, rows, events and timers as `orders`' async routes, for the service benchmark's
side-by-side of the two (``ORDERS_HTTP_ROUTES=sync``)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Path, Request
from sqlalchemy.orm import Session

from outboxkit_workshop.saga.orders import (
    ENTER_TIMELINE,
    GET_ORDER,
    PLACE_ORDER,
    PLACE_ROW,
    NewOrder,
    PlaceOrder,
    order_query,
)
from outboxkit_workshop.saga.rules import ORDER_ID
from service_template import (
    IdempotencyKey,
    Problem,
    UnitOfWork,
    idempotent,
    service_router,
    unit_of_work,
)

router = service_router(tags=["orders"])
UoW = Annotated[UnitOfWork, Depends(unit_of_work)]


@router.post("/orders", **PLACE_ORDER)
def place_order(
    body: PlaceOrder,
    request: Request,
    uow: UoW,
    idempotency_key: IdempotencyKey = None,
) -> Any:
    def create() -> tuple[int, Any]:
        new = NewOrder.of(body, request)
        created_at = uow.session.execute(PLACE_ROW, new.placed).scalar_one()
        at = uow.session.execute(ENTER_TIMELINE, new.entry).scalar_one()
        uow.publish_event(new.event)
        uow.schedule_event(new.timer, delay=new.timer.seconds, key=new.timer_key)
        return new.answer(created_at, at)

    return idempotent(uow, request, idempotency_key, body.model_dump(mode="json"), create)


@router.get("/orders/{order_id}", **GET_ORDER)
def get_order(order_id: Annotated[str, Path(pattern=ORDER_ID)], uow: UoW) -> Any:
    view = _view(uow.session, order_id)
    if view is None:
        raise Problem(404, f"order {order_id} not found")
    return view


def _view(session: Session, order_id: str) -> dict[str, Any] | None:
    order, history = order_query(order_id)
    row = session.execute(order).mappings().first()
    if row is None:
        return None
    events = session.execute(history).mappings().all()
    return {**row, "timeline": [dict(e) for e in events]}
