"""The saga's event contracts: one model per event type, imported by all three services. The
orders service publishes OrderPlaced, payments and shipping publish their replies, each validated
on the way out; every consumer decodes what it applies against the same models, and an event off
its contract (a wrong type, a value out of range, a field missing, an id or a string malformed,
an event about another order than its key, of another aggregate) is parked with the reason,
never applied. No database here.

Strict means no coercion: ``true`` is not the number 1, ``"5"`` and ``5.0`` are not integers."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from outbox.contracts import Contracts, Event
from outboxkit_workshop.saga import rules

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


class _SagaEvent(Event):
    # Unknown fields are ignored (a newer producer may add some); the known ones are strict.
    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)
    key = "order_id"
    order_id: OrderId


class OrderPlaced(_SagaEvent):
    event_type = rules.ORDER_PLACED
    aggregate_type = rules.ORDER
    customer: Customer
    items: Items
    amount: Amount


class OrderCancelled(_SagaEvent):
    """The order was cancelled by its timer: a capture, even a late one, is refunded."""

    event_type = rules.ORDER_CANCELLED
    aggregate_type = rules.ORDER
    reason: Reason


class _Timer(_SagaEvent):
    """A timer the orders service schedules for itself (a scheduled message): the step it
    waits for did not answer in time when it arrives, unless it was cancelled before."""

    aggregate_type = rules.TIMEOUT
    seconds: Annotated[float, Field(ge=0)]


class PaymentTimedOut(_Timer):
    event_type = rules.PAYMENT_TIMED_OUT


class ShippingTimedOut(_Timer):
    event_type = rules.SHIPPING_TIMED_OUT


class _PaymentSettled(_SagaEvent):
    aggregate_type = rules.PAYMENT
    customer: Customer
    items: Items
    amount: Amount
    reason: Reason


class PaymentCaptured(_PaymentSettled):
    event_type = rules.PAYMENT_CAPTURED


class PaymentDeclined(_PaymentSettled):
    event_type = rules.PAYMENT_DECLINED


class PaymentRefunded(_SagaEvent):
    event_type = rules.PAYMENT_REFUNDED
    aggregate_type = rules.PAYMENT
    amount: Amount
    reason: Reason


class _ShipmentDone(_SagaEvent):
    aggregate_type = rules.SHIPMENT
    reason: Reason


class ShipmentScheduled(_ShipmentDone):
    event_type = rules.SHIPMENT_SCHEDULED


class ShipmentFailed(_ShipmentDone):
    event_type = rules.SHIPMENT_FAILED


class ShipmentCancelled(_ShipmentDone):
    event_type = rules.SHIPMENT_CANCELLED


CONTRACTS = Contracts(
    [
        OrderPlaced,
        OrderCancelled,
        PaymentTimedOut,
        ShippingTimedOut,
        PaymentCaptured,
        PaymentDeclined,
        PaymentRefunded,
        ShipmentScheduled,
        ShipmentFailed,
        ShipmentCancelled,
    ]
)
