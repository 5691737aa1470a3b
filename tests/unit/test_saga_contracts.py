"""The payload check of the saga's consumers, without a database: what the services publish
passes, and a payload with a wrong type, a value out of range, a field missing or an id or a
string malformed gets a reason (the inbox parks it with that reason, never applies it)."""

from __future__ import annotations

from typing import Any

import pytest

from inbox import BatchHandler
from inbox.decision import Action, Incoming, PartitionView, decide
from outbox import Envelope
from outboxkit_workshop.saga import orders, payments, rules, shipping
from outboxkit_workshop.saga.contracts import CONTRACTS

ORDER_1 = "00000000-0000-4000-8000-000000000001"
ITEMS = [{"sku": "widget", "qty": 2}, {"sku": "gadget-2", "qty": 1}]
VALID = {
    rules.ORDER_PLACED: {"customer": "vip-ada", "items": ITEMS, "amount": 120},
    rules.PAYMENT_CAPTURED: {
        "customer": "vip-ada",
        "items": ITEMS,
        "amount": 120,
        "reason": "within limit 1000",
    },
    rules.PAYMENT_DECLINED: {
        "customer": "bob",
        "items": ITEMS,
        "amount": 900,
        "reason": "amount 900 over limit 500",
    },
    rules.PAYMENT_REFUNDED: {"amount": 120, "reason": "out of stock: widget"},
    rules.SHIPMENT_SCHEDULED: {"reason": "reserved"},
    rules.SHIPMENT_FAILED: {"reason": "out of stock: widget"},
    rules.SHIPMENT_CANCELLED: {"reason": "payment refunded"},
    rules.ORDER_CANCELLED: {"reason": "payment timed out after 30 s"},
    rules.PAYMENT_TIMED_OUT: {"seconds": 30},
    rules.SHIPPING_TIMED_OUT: {"seconds": 2.5},
}
AGGREGATE = {
    rules.ORDER_PLACED: rules.ORDER,
    rules.PAYMENT_CAPTURED: rules.PAYMENT,
    rules.PAYMENT_DECLINED: rules.PAYMENT,
    rules.PAYMENT_REFUNDED: rules.PAYMENT,
    rules.SHIPMENT_SCHEDULED: rules.SHIPMENT,
    rules.SHIPMENT_FAILED: rules.SHIPMENT,
    rules.SHIPMENT_CANCELLED: rules.SHIPMENT,
    rules.ORDER_CANCELLED: rules.ORDER,
    rules.PAYMENT_TIMED_OUT: rules.TIMEOUT,
    rules.SHIPPING_TIMED_OUT: rules.TIMEOUT,
}


def event(event_type: str, payload: Any = None, **changes: Any) -> Envelope:
    """An event of ``event_type`` with a valid payload changed by ``changes`` (None: removed)."""
    body = {"order_id": ORDER_1, **VALID[event_type], **changes} if payload is None else payload
    body = {k: v for k, v in body.items() if v is not None} if isinstance(body, dict) else body
    return Envelope(AGGREGATE[event_type], ORDER_1, event_type, body)


@pytest.mark.parametrize("event_type", list(VALID))
def test_a_valid_payload_of_each_type_passes(event_type):
    assert CONTRACTS.problem(event(event_type)) is None


def test_the_replies_the_services_publish_pass():
    def published(reply: rules.Reply) -> Envelope:
        return Envelope(reply.aggregate_type, reply.order_id, reply.event_type, reply.payload)

    settled = rules.settle_payments({}, [event(rules.ORDER_PLACED)])
    captured = published(settled.replies[0])
    reserved = rules.reserve_stock({"widget": 5, "gadget-2": 5}, [captured])
    short = rules.reserve_stock({}, [captured])
    payment = rules.Payment(ORDER_1, "vip-ada", 120, rules.CAPTURED, "within limit 1000")
    refund = rules.settle_payments({ORDER_1: payment}, [published(short.replies[0])])
    replies = [*settled.replies, *reserved.replies, *short.replies, *refund.replies]
    assert [r.event_type for r in replies] == [
        rules.PAYMENT_CAPTURED,
        rules.SHIPMENT_SCHEDULED,
        rules.SHIPMENT_FAILED,
        rules.PAYMENT_REFUNDED,
    ]
    assert [CONTRACTS.problem(published(r)) for r in replies] == [None] * 4


@pytest.mark.parametrize(
    ("event_type", "changes", "reason"),
    [
        (
            rules.ORDER_PLACED,
            {"amount": -5},
            "amount: Input should be greater than or equal to 1 (got -5)",
        ),
        (rules.ORDER_PLACED, {"amount": 0}, "amount: Input should be greater than or equal to 1"),
        (
            rules.ORDER_PLACED,
            {"amount": True},
            "amount: Input should be a valid integer (got True)",
        ),
        (rules.ORDER_PLACED, {"amount": "5"}, "amount: Input should be a valid integer (got '5')"),
        (rules.ORDER_PLACED, {"amount": 5.0}, "amount: Input should be a valid integer (got 5.0)"),
        (rules.ORDER_PLACED, {"amount": 10**7}, "amount: Input should be less than or equal to"),
        (rules.ORDER_PLACED, {"amount": None}, "amount: Field required"),
        (rules.ORDER_PLACED, {"customer": "a b"}, "customer: String should match pattern"),
        (rules.ORDER_PLACED, {"items": []}, "items: List should have at least 1 item"),
        (
            rules.ORDER_PLACED,
            {"items": [{"sku": "widget", "qty": 1, "price": 0}]},
            "items.0.price: Extra inputs are not permitted",
        ),
        (
            rules.PAYMENT_CAPTURED,
            {"items": [{"sku": "widget", "qty": -5}]},
            "items.0.qty: Input should be greater than or equal to 1 (got -5)",
        ),
        (
            rules.PAYMENT_CAPTURED,
            {"items": [{"sku": "widget", "qty": 0}]},
            "items.0.qty: Input should be greater than or equal to 1 (got 0)",
        ),
        (
            rules.PAYMENT_CAPTURED,
            {"items": [{"sku": "widget", "qty": False}]},
            "items.0.qty: Input should be a valid integer (got False)",
        ),
        (
            rules.PAYMENT_CAPTURED,
            {"items": [{"sku": "Widget!", "qty": 1}]},
            "items.0.sku: String should match pattern",
        ),
        (rules.PAYMENT_CAPTURED, {"reason": None}, "reason: Field required"),
        (rules.PAYMENT_REFUNDED, {"amount": -120}, "amount: Input should be greater than or equal"),
        (rules.SHIPMENT_FAILED, {"reason": True}, "reason: Input should be a valid string"),
        (rules.SHIPMENT_FAILED, {"reason": "a\x00b"}, "reason: String should match pattern"),
        (rules.SHIPMENT_FAILED, {"reason": "x" * 1001}, "reason: String should have at most"),
        (rules.SHIPMENT_SCHEDULED, {"order_id": 7}, "order_id: Input should be a valid string"),
        (rules.SHIPMENT_SCHEDULED, {"order_id": "'; drop"}, "order_id: String should match"),
    ],
)
def test_a_payload_off_its_schema_gets_the_reason(event_type, changes, reason):
    problem = CONTRACTS.problem(event(event_type, **changes))
    assert problem is not None and problem.startswith(reason), problem


def test_a_payload_that_is_no_object_or_is_empty_gets_a_reason():
    assert CONTRACTS.problem(event(rules.ORDER_PLACED, [1])) == (
        "payload: Input should be a valid dictionary or instance of OrderPlaced (got [1])"
    )
    missing = CONTRACTS.problem(event(rules.PAYMENT_CAPTURED, {}))
    assert missing == (
        "order_id: Field required; customer: Field required; items: Field required; and 2 more"
    )


def test_an_event_about_another_order_than_its_key_or_of_another_aggregate_gets_a_reason():
    other = "00000000-0000-4000-8000-000000000002"
    assert CONTRACTS.problem(event(rules.SHIPMENT_FAILED, order_id=other)) == (
        f"order_id '{other}' is not the event's key '{ORDER_1}'"
    )
    forged = Envelope(
        rules.ORDER, ORDER_1, rules.PAYMENT_CAPTURED, event(rules.PAYMENT_CAPTURED).payload
    )
    assert CONTRACTS.problem(forged) == "PaymentCaptured is a payment event, not 'order'"


def test_unknown_fields_are_ignored_and_unknown_types_left_to_the_inbox():
    assert CONTRACTS.problem(event(rules.ORDER_PLACED, note="gift")) is None
    assert CONTRACTS.problem(Envelope(rules.ORDER, ORDER_1, "OrderTeleported", {})) is None


@pytest.mark.parametrize("service", [orders, payments, shipping])
def test_every_saga_consumer_checks_every_type_it_applies(service):
    handlers: BatchHandler = service.HANDLERS
    assert handlers.event_types
    for event_type in handlers.event_types:
        bad = event(event_type, order_id="not an id")
        assert handlers.invalid(bad) == CONTRACTS.problem(bad) is not None
        assert handlers.invalid(event(event_type)) is None


# -- the inbox parks what the check rejects -------------------------------------------------


def test_the_decision_parks_an_invalid_payload_with_its_reason_and_holds_its_key():
    view = PartitionView(-1, frozenset(), frozenset())
    records = [
        Incoming(0, "k1", "e0", rules.ORDER_PLACED, invalid="amount: negative"),
        Incoming(1, "k1", "e1", rules.ORDER_PLACED),
        Incoming(2, "k2", "e2", rules.ORDER_PLACED),
    ]
    out = decide(view, records, known_types={rules.ORDER_PLACED})
    assert [(d.action, d.reason) for d in out] == [
        (Action.PARK, "invalid payload: amount: negative"),
        (Action.HOLD, "held behind a parked record of key k1"),
        (Action.APPLY, ""),
    ]


def test_a_check_that_crashes_rejects_the_event_and_one_of_another_type_is_not_checked():
    def crashing(event: Envelope) -> str | None:
        raise KeyError("order_id")

    handler = BatchHandler(lambda events, uow: None, frozenset({rules.ORDER_PLACED}), crashing)
    assert handler.invalid(event(rules.ORDER_PLACED)) == (
        "the payload check failed: KeyError: 'order_id'"
    )
    assert handler.invalid(event(rules.SHIPMENT_FAILED)) is None
    assert BatchHandler(lambda events, uow: None).invalid(event(rules.ORDER_PLACED)) is None
