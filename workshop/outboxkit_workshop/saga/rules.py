"""The saga's business rules and event vocabulary, shared by its services, and each consumer's
step as a pure fold: the state a slice of events touches and the events in, the writes and the
replies out. No database here: the services' batch handlers load, fold, then write set-wise."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from outboxkit.kernel.envelope import Envelope

ORDER, PAYMENT, SHIPMENT = "order", "payment", "shipment"  # aggregate types (topic suffixes)
TIMEOUT = "timeout"  # the orders service's own timers, scheduled messages it consumes itself
AGGREGATES = (ORDER, PAYMENT, SHIPMENT, TIMEOUT)
# The aggregate types (topics) each service's consumer job reads.
READS = {
    "orders": (PAYMENT, SHIPMENT, TIMEOUT),
    "payments": (ORDER, SHIPMENT),
    "shipping": (PAYMENT,),
}

# The aggregate types each service publishes (its outbox's rows): no other service's events of
# those types are applied (each consumer job's publishers setting, `inbox.publishers`).
PUBLISHES = {"orders": (ORDER, TIMEOUT), "payments": (PAYMENT,), "shipping": (SHIPMENT,)}


def publishers(service: str, source_of: Callable[[str], str]) -> dict[str, list[str]]:
    """``service``'s job's publishers setting: who may publish each aggregate type it reads,
    ``source_of(producer)`` being the source name (server name) of the producing service's
    connector, as the deployment names it."""
    return {
        kind: [source_of(producer)]
        for producer, kinds in PUBLISHES.items()
        for kind in kinds
        if kind in READS.get(service, ())
    }


# Event types by producer.
ORDER_PLACED, ORDER_CANCELLED = "OrderPlaced", "OrderCancelled"
PAYMENT_TIMED_OUT, SHIPPING_TIMED_OUT = "PaymentTimedOut", "ShippingTimedOut"  # timers
PAYMENT_CAPTURED, PAYMENT_DECLINED, PAYMENT_REFUNDED = (
    "PaymentCaptured",
    "PaymentDeclined",
    "PaymentRefunded",
)
SHIPMENT_SCHEDULED, SHIPMENT_FAILED, SHIPMENT_CANCELLED = (
    "ShipmentScheduled",
    "ShipmentFailed",
    "ShipmentCancelled",
)

PENDING, PAID, SHIPPED, CANCELLED = "PENDING", "PAID", "SHIPPED", "CANCELLED"
FINAL = (SHIPPED, CANCELLED)
CAPTURED, DECLINED, REFUNDED = "CAPTURED", "DECLINED", "REFUNDED"  # payment statuses
SCHEDULED, FAILED, SHIPMENT_VOID = "SCHEDULED", "FAILED", "CANCELLED"  # shipment statuses

VIP_PREFIX, VIP_LIMIT, STANDARD_LIMIT = "vip-", 1000, 500
SLOW_PREFIX = "slow-"  # customers whose card gateway answers late (`gateway_wait`)

# How each payment or shipment event moves an order, by the order's status (others stay).
ORDER_MOVES = {
    PAYMENT_CAPTURED: {PENDING: PAID},
    PAYMENT_DECLINED: {PENDING: CANCELLED},
    # Shipment and payment events travel on different topics: a ShipmentScheduled may be
    # applied before the PaymentCaptured that caused it. Ranks only go forward.
    SHIPMENT_SCHEDULED: {PENDING: SHIPPED, PAID: SHIPPED},
    SHIPMENT_FAILED: {},  # the refund that follows cancels the order
    PAYMENT_REFUNDED: {PENDING: CANCELLED, PAID: CANCELLED},
    # A timer cancels the order still waiting for that step; the refund and the shipment's
    # cancellation follow (OrderCancelled), and replies arriving late move it no more.
    PAYMENT_TIMED_OUT: {PENDING: CANCELLED},
    SHIPPING_TIMED_OUT: {PAID: CANCELLED},
    SHIPMENT_CANCELLED: {},
}
TIMERS = (PAYMENT_TIMED_OUT, SHIPPING_TIMED_OUT)


def timer_key(event_type: str, order_id: str) -> str:
    """The key an order's timer is scheduled under, to cancel it once its step is done."""
    return f"{event_type}:{order_id}"


def credit_limit(customer: str) -> int:
    """The largest order amount a customer may pay: 1000 for `vip-` customers, else 500."""
    return VIP_LIMIT if customer.startswith(VIP_PREFIX) else STANDARD_LIMIT


def payment_decision(customer: str, amount: int) -> tuple[bool, str]:
    """Capture when the amount is within the customer's per-order limit, else decline."""
    limit = credit_limit(customer)
    if amount <= limit:
        return True, f"within limit {limit}"
    return False, f"amount {amount} over limit {limit}"


def gateway_wait(events: Iterable[Envelope], slow_seconds: float, now: float) -> float:
    """Seconds until the card gateway answers for every order placed among ``events``: a
    `slow-` customer's answers ``slow_seconds`` after the order was placed (``now`` and the
    events' times in epoch seconds); 0 when all have answered."""
    waits = [
        e.created_at.timestamp() + slow_seconds - now
        for e in events
        if e.event_type == ORDER_PLACED and str(e.payload["customer"]).startswith(SLOW_PREFIX)
    ]
    return max([0.0, *waits])


ORDER_ID = r"^[0-9a-fA-F-]{1,36}$"  # order ids are UUIDs; anything else is a 422, never a query


def order_of(event: Envelope) -> str:
    """The id of the order a saga event is about."""
    return str(event.payload["order_id"])


@dataclass(frozen=True)
class Reply:
    """An event a saga step publishes about an order, caused by the event it consumed."""

    cause: Envelope
    aggregate_type: str
    event_type: str
    payload: dict[str, Any]

    @property
    def order_id(self) -> str:
        """The order it is about (its aggregate id)."""
        return str(self.payload["order_id"])


# -- orders: payment and shipment events move the order -------------------------------------


@dataclass(frozen=True)
class OrderMoves:
    """What a slice of payment, shipment and timer events does to the orders."""

    statuses: dict[str, str]  # order id -> its status after the slice, for the orders it moved
    timeline: list[tuple[Envelope, str]]  # each event, with the status it left its order in
    paid: list[Envelope] = field(default_factory=list)  # captures that made an order PAID
    timed_out: list[Envelope] = field(default_factory=list)  # timers that cancelled an order
    # Orders the slice made final: their timers are cancelled (whichever is still pending).
    finished: list[str] = field(default_factory=list)


def follow_orders(statuses: Mapping[str, str], events: Sequence[Envelope]) -> OrderMoves:
    """Move the orders (``statuses``: each one's current status) by the events in offset order;
    ValueError for an event of an unknown order."""
    now = dict(statuses)
    timeline = []
    paid, timed_out, finished = [], [], []
    for event in events:
        order_id = order_of(event)
        if order_id not in now:
            raise ValueError(f"{event.event_type} for unknown order {order_id}")
        before = now[order_id]
        after = now[order_id] = ORDER_MOVES[event.event_type].get(before, before)
        timeline.append((event, after))
        if after == before:
            continue
        if after == PAID:
            paid.append(event)
        elif after in FINAL:
            finished.append(order_id)
            if event.event_type in TIMERS:
                timed_out.append(event)
    moved = {i: s for i, s in now.items() if s != statuses[i]}
    paid = [e for e in paid if now[order_of(e)] == PAID]  # not those the slice moved on
    return OrderMoves(moved, timeline, paid, timed_out, finished)


# -- payments: capture or decline each order, refund when its shipment failed ---------------


@dataclass(frozen=True)
class Payment:
    """An order's payment as the payments service keeps it."""

    order_id: str
    customer: str
    amount: int
    status: str
    reason: str


@dataclass
class Settlement:
    """What a slice of order and shipment events does to the payments."""

    known: Mapping[str, Payment]  # payments that existed before the slice, as loaded
    created: dict[str, Payment] = field(default_factory=dict)  # new, as the slice leaves them
    changed: dict[str, Payment] = field(default_factory=dict)  # known, as the slice leaves them
    log: list[tuple[str, str, Envelope]] = field(default_factory=list)  # order, action, event
    replies: list[Reply] = field(default_factory=list)

    def payment(self, order_id: str) -> Payment | None:
        """The order's payment as the slice has left it so far (None: none known)."""
        for payments in (self.created, self.changed, self.known):
            if order_id in payments:
                return payments[order_id]
        return None


def settle_payments(known: Mapping[str, Payment], events: Sequence[Envelope]) -> Settlement:
    """Capture or decline each placed order by the credit-limit rule and refund the captured
    payment of each failed shipment, in offset order. ``known``: the current payments of the
    refunded orders; a refund of a payment that is not CAPTURED raises ValueError, and so does a
    second order placed under one id (a payment already in the table fails its INSERT). An
    order cancelled by its timer (``OrderCancelled``: ``known`` has its payment too) gets its
    capture refunded, however late the capture came; a declined or refunded payment stays."""
    done = Settlement(known)
    for event in events:
        if event.event_type == ORDER_PLACED:
            _capture(done, event)
        elif event.event_type == SHIPMENT_FAILED:
            _refund(done, event)
        elif event.event_type == ORDER_CANCELLED:
            payment = done.payment(order_of(event))
            if payment is not None and payment.status == CAPTURED:
                _refund(done, event)
    return done


def _capture(done: Settlement, event: Envelope) -> None:
    p = event.payload
    order_id, customer, amount = str(p["order_id"]), str(p["customer"]), int(p["amount"])
    if done.payment(order_id) is not None:
        raise ValueError(f"order {order_id} already has a payment")
    captured, reason = payment_decision(customer, amount)
    status = CAPTURED if captured else DECLINED
    done.created[order_id] = Payment(order_id, customer, amount, status, reason)
    done.log.append((order_id, status.lower(), event))
    payload = {
        "order_id": order_id,
        "customer": customer,
        "amount": amount,
        "items": p["items"],
        "reason": reason,
    }
    event_type = PAYMENT_CAPTURED if captured else PAYMENT_DECLINED
    done.replies.append(Reply(event, PAYMENT, event_type, payload))


def _refund(done: Settlement, event: Envelope) -> None:
    order_id, reason = order_of(event), event.payload.get("reason")
    payment = done.payment(order_id)
    if payment is not None and payment.status == REFUNDED:
        # Refunded already: the order's timer cancelled it while its shipment was failing
        # (or the other way round). One refund is owed, and it was made.
        done.log.append((order_id, "refund-owed", event))
        return
    if payment is None or payment.status != CAPTURED:
        raise ValueError(f"refund for order {order_id}: payment is {payment and payment.status}")
    refunded = replace(payment, status=REFUNDED, reason=f"refunded: {reason}")
    (done.created if order_id in done.created else done.changed)[order_id] = refunded
    done.log.append((order_id, "refunded", event))
    payload = {"order_id": order_id, "amount": payment.amount, "reason": reason}
    done.replies.append(Reply(event, PAYMENT, PAYMENT_REFUNDED, payload))


# -- shipping: reserve every item of a paid order or none -----------------------------------


@dataclass(frozen=True)
class Shipment:
    """An order's shipment as the shipping service keeps it."""

    order_id: str
    status: str
    reason: str
    items: Any


@dataclass
class Reservation:
    """What a slice of payment events does in the warehouse."""

    available: dict[str, int]  # stock per SKU as the slice leaves it
    taken: dict[str, int] = field(default_factory=dict)  # SKU -> quantity reserved (- returned)
    shipments: list[Shipment] = field(default_factory=list)  # new, as the slice leaves them
    cancelled: list[Shipment] = field(default_factory=list)  # known ones the slice cancelled
    replies: list[Reply] = field(default_factory=list)


def wanted(items: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """The quantity of each SKU an order's items ask for."""
    quantities: dict[str, int] = {}
    for item in items:
        quantities[item["sku"]] = quantities.get(item["sku"], 0) + int(item["qty"])
    return quantities


def skus_wanted(events: Iterable[Envelope], known: Iterable[Shipment] = ()) -> list[str]:
    """The SKUs the captured payments among ``events`` ask for and those ``known`` shipments
    hold (a refund returns them), sorted (the locking order)."""
    captured = (e.payload["items"] for e in events if e.event_type == PAYMENT_CAPTURED)
    held = (s.items for s in known if s.status == SCHEDULED)
    return sorted({sku for items in (*captured, *held) for sku in wanted(items)})


def reserve_stock(
    available: Mapping[str, int],
    events: Sequence[Envelope],
    known: Mapping[str, Shipment] | None = None,
) -> Reservation:
    """For each captured payment in offset order, reserve every item of its order or none,
    against the stock as the slice leaves it (``available``: the current stock of
    ``skus_wanted``; a SKU not in it has none). A refund of an order whose shipment is
    scheduled (in this slice, or in ``known``: the refunded orders' shipments) cancels it and
    returns its stock: the payment was refunded because the order was cancelled, and its
    shipment must not leave. Other events change nothing."""
    done = Reservation(dict(available))
    for event in events:
        if event.event_type == PAYMENT_CAPTURED:
            _reserve(done, event)
        elif event.event_type == PAYMENT_REFUNDED:
            _cancel_shipment(done, event, known or {})
    return done


def _cancel_shipment(done: Reservation, event: Envelope, known: Mapping[str, Shipment]) -> None:
    order_id = order_of(event)
    new = next((s for s in done.shipments if s.order_id == order_id), None)
    shipment = new or known.get(order_id)
    if shipment is None or shipment.status != SCHEDULED:
        return
    cancelled = replace(shipment, status=SHIPMENT_VOID, reason="cancelled: payment refunded")
    if new is not None:
        done.shipments[done.shipments.index(new)] = cancelled
    else:
        done.cancelled.append(cancelled)
    for sku, qty in wanted(shipment.items).items():
        done.available[sku] = done.available.get(sku, 0) + qty
        done.taken[sku] = done.taken.get(sku, 0) - qty
    payload = {"order_id": order_id, "reason": "payment refunded"}
    done.replies.append(Reply(event, SHIPMENT, SHIPMENT_CANCELLED, payload))


def _reserve(done: Reservation, event: Envelope) -> None:
    order_id, items = order_of(event), event.payload["items"]
    asked = wanted(items)
    short = [sku for sku, qty in sorted(asked.items()) if done.available.get(sku, 0) < qty]
    if short:
        status, reason, event_type = FAILED, f"out of stock: {', '.join(short)}", SHIPMENT_FAILED
    else:
        for sku, qty in asked.items():
            done.available[sku] = done.available.get(sku, 0) - qty
            done.taken[sku] = done.taken.get(sku, 0) + qty
        status, reason, event_type = SCHEDULED, "reserved", SHIPMENT_SCHEDULED
    done.shipments.append(Shipment(order_id, status, reason, items))
    payload = {"order_id": order_id, "reason": reason}
    done.replies.append(Reply(event, SHIPMENT, event_type, payload))
