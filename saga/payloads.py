"""The payloads of the saga's events as strict models, and the check each consumer runs before it
applies an event: a payload off its schema (a wrong type, a value out of range, a field missing,
an id or a string malformed) is parked with the reason, never applied. No database here.

Strict means no coercion: ``true`` is not the number 1, ``"5"`` and ``5.0`` are not integers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from outbox.envelope import Envelope
from saga import rules

OrderId = Annotated[str, Field(pattern=rules.ORDER_ID)]
Customer = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$", examples=["vip-ada"])]
Sku = Annotated[str, Field(pattern=r"^[a-z0-9-]{1,32}$", examples=["widget"])]
Quantity = Annotated[int, Field(ge=1, le=100)]
Amount = Annotated[int, Field(ge=1, le=1_000_000, description="whole currency units")]
# Free text a service explains a step with: bounded, and no control characters (NUL included).
Reason = Annotated[str, Field(max_length=1000, pattern=r"^[^\x00-\x1f\x7f]*$")]
MAX_ITEMS = 20


class Item(BaseModel):
    """One line of an order: a SKU and how many (kept verbatim, so nothing else is allowed)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    sku: Sku
    qty: Quantity


Items = Annotated[list[Item], Field(min_length=1, max_length=MAX_ITEMS)]


class _Payload(BaseModel):
    # Unknown fields are ignored (a newer producer may add some); the known ones are strict.
    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)
    order_id: OrderId


class OrderPlaced(_Payload):
    customer: Customer
    items: Items
    amount: Amount


class PaymentSettled(_Payload):
    """A PaymentCaptured or PaymentDeclined."""

    customer: Customer
    items: Items
    amount: Amount
    reason: Reason


class PaymentRefunded(_Payload):
    amount: Amount
    reason: Reason


class ShipmentDone(_Payload):
    """A ShipmentScheduled or ShipmentFailed."""

    reason: Reason


# Each event type's payload, and the aggregate (producer) it belongs to.
SCHEMAS: Mapping[str, tuple[str, type[_Payload]]] = {
    rules.ORDER_PLACED: (rules.ORDER, OrderPlaced),
    rules.PAYMENT_CAPTURED: (rules.PAYMENT, PaymentSettled),
    rules.PAYMENT_DECLINED: (rules.PAYMENT, PaymentSettled),
    rules.PAYMENT_REFUNDED: (rules.PAYMENT, PaymentRefunded),
    rules.SHIPMENT_SCHEDULED: (rules.SHIPMENT, ShipmentDone),
    rules.SHIPMENT_FAILED: (rules.SHIPMENT, ShipmentDone),
}


def payload_problem(event: Envelope) -> str | None:
    """Why a saga event must not be applied (None: it may be): its payload off its type's schema,
    or the event not of its type's aggregate or not keyed by the order it is about. A type not
    in ``SCHEMAS`` is no concern here (the inbox parks unknown types)."""
    if event.event_type not in SCHEMAS:
        return None
    aggregate, schema = SCHEMAS[event.event_type]
    if event.aggregate_type != aggregate:
        return f"{event.event_type} is a {aggregate} event, not {_shown(event.aggregate_type)}"
    try:
        payload = schema.model_validate(event.payload)
    except ValidationError as exc:
        return describe(exc)
    if payload.order_id != event.aggregate_id:
        return f"order_id {payload.order_id!r} is not the event's key {_shown(event.aggregate_id)}"
    return None


def describe(error: ValidationError, *, most: int = 3) -> str:
    """The first few problems of a validation error, each with where and what it got."""
    problems = error.errors(include_url=False)
    parts = []
    for e in problems[:most]:
        where = ".".join(str(p) for p in e["loc"]) or "payload"
        got = "" if e["type"] == "missing" else f" (got {_shown(e['input'])})"
        parts.append(f"{where}: {e['msg']}{got}")
    more = len(problems) - most
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def _shown(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
