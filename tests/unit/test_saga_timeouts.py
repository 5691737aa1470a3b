"""The saga's timers as pure folds: which orders a slice makes PAID (they get a shipping timer),
final (their timers are cancelled) or cancels by a timer (announced, so that the payment is
refunded); a capture arriving after the cancellation is refunded; a shipment scheduled for a
refunded payment is cancelled and its stock returned. And the orders handler's timer writes."""

from __future__ import annotations

from outbox import Envelope
from outboxkit_workshop.saga import orders, rules
from tests.unit.test_saga_handlers import ORDER_1, FakeUnitOfWork, payment, placed, shipment

ORDER_2 = "00000000-0000-4000-8000-000000000002"


def timer(event_type: str, order_id: str = ORDER_1, seconds: float = 30) -> Envelope:
    return Envelope(rules.TIMEOUT, order_id, event_type, {"order_id": order_id, "seconds": seconds})


def cancelled(order_id: str = ORDER_1) -> Envelope:
    payload = {"order_id": order_id, "reason": "payment timed out after 30 s"}
    return Envelope(rules.ORDER, order_id, rules.ORDER_CANCELLED, payload)


def test_a_payment_timer_cancels_a_pending_order_and_a_late_capture_moves_it_no_more():
    moves = rules.follow_orders(
        {ORDER_1: rules.PENDING},
        [timer(rules.PAYMENT_TIMED_OUT), payment(rules.PAYMENT_CAPTURED)],
    )
    assert moves.statuses == {ORDER_1: rules.CANCELLED}
    assert [e.event_type for e in moves.timed_out] == [rules.PAYMENT_TIMED_OUT]
    assert moves.finished == [ORDER_1] and moves.paid == []


def test_a_timer_after_its_step_changes_nothing():
    moves = rules.follow_orders(
        {ORDER_1: rules.PAID, ORDER_2: rules.SHIPPED},
        [timer(rules.PAYMENT_TIMED_OUT), timer(rules.SHIPPING_TIMED_OUT, ORDER_2)],
    )
    assert moves.statuses == {} and moves.timed_out == [] and moves.finished == []


def test_paid_orders_get_a_shipping_timer_unless_the_slice_shipped_them():
    moves = rules.follow_orders(
        {ORDER_1: rules.PENDING, ORDER_2: rules.PENDING},
        [
            payment(rules.PAYMENT_CAPTURED),
            payment(rules.PAYMENT_CAPTURED, ORDER_2),
            shipment(rules.SHIPMENT_SCHEDULED, ORDER_2),
        ],
    )
    assert [rules.order_of(e) for e in moves.paid] == [ORDER_1]
    assert moves.finished == [ORDER_2]


def test_a_shipping_timer_cancels_a_paid_order():
    moves = rules.follow_orders({ORDER_1: rules.PAID}, [timer(rules.SHIPPING_TIMED_OUT)])
    assert moves.statuses == {ORDER_1: rules.CANCELLED} and len(moves.timed_out) == 1


def test_a_capture_after_the_cancellation_is_refunded():
    done = rules.settle_payments({}, [placed("ada", 100), cancelled()])
    assert done.created[ORDER_1].status == rules.REFUNDED
    assert [r.event_type for r in done.replies] == [
        rules.PAYMENT_CAPTURED,
        rules.PAYMENT_REFUNDED,
    ]
    declined = rules.settle_payments({}, [placed("ada", 900), cancelled()])
    assert declined.created[ORDER_1].status == rules.DECLINED  # nothing to refund
    assert [r.event_type for r in declined.replies] == [rules.PAYMENT_DECLINED]


def test_a_refund_cancels_the_scheduled_shipment_and_returns_its_stock():
    capture = payment(rules.PAYMENT_CAPTURED, widget=2)
    refund = Envelope(
        rules.PAYMENT,
        ORDER_1,
        rules.PAYMENT_REFUNDED,
        {"order_id": ORDER_1, "amount": 100, "reason": "payment timed out"},
    )
    same_slice = rules.reserve_stock({"widget": 5}, [capture, refund])
    assert [s.status for s in same_slice.shipments] == [rules.SHIPMENT_VOID]
    assert same_slice.available == {"widget": 5} and same_slice.taken == {"widget": 0}
    assert [r.event_type for r in same_slice.replies] == [
        rules.SHIPMENT_SCHEDULED,
        rules.SHIPMENT_CANCELLED,
    ]
    known = rules.Shipment(ORDER_1, rules.SCHEDULED, "reserved", [{"sku": "widget", "qty": 2}])
    assert rules.skus_wanted([refund], [known]) == ["widget"]
    later = rules.reserve_stock({"widget": 3}, [refund], {ORDER_1: known})
    assert later.cancelled[0].status == rules.SHIPMENT_VOID
    assert later.available == {"widget": 5} and later.taken == {"widget": -2}
    failed = rules.Shipment(ORDER_1, rules.FAILED, "out of stock", [])
    assert rules.reserve_stock({}, [refund], {ORDER_1: failed}).replies == []


def test_the_orders_handler_schedules_cancels_and_announces_its_timers():
    from types import SimpleNamespace

    rows = [
        SimpleNamespace(id=ORDER_1, status=rules.PENDING),
        SimpleNamespace(id=ORDER_2, status=rules.PENDING),
    ]
    uow = FakeUnitOfWork(rows)
    handler = orders.handlers_for(orders.Timeouts(payment=30, shipping=45))
    handler.apply([payment(rules.PAYMENT_CAPTURED), timer(rules.PAYMENT_TIMED_OUT, ORDER_2)], uow)  # type: ignore[arg-type]
    assert sorted(uow.cancelled) == sorted(
        [
            rules.timer_key(rules.PAYMENT_TIMED_OUT, ORDER_1),
            rules.timer_key(rules.PAYMENT_TIMED_OUT, ORDER_2),
            rules.timer_key(rules.SHIPPING_TIMED_OUT, ORDER_2),
        ]
    )
    [(event, due)] = uow.scheduled
    assert (event.event_type, event.payload["order_id"], due.delay) == (
        rules.SHIPPING_TIMED_OUT,
        ORDER_1,
        45,
    )
    assert due.key == rules.timer_key(rules.SHIPPING_TIMED_OUT, ORDER_1)
    [[announced]] = uow.published
    assert announced.event_type == rules.ORDER_CANCELLED
    assert announced.payload == {"order_id": ORDER_2, "reason": "payment timed out after 30 s"}


def test_a_shipment_failing_after_the_timers_refund_is_not_refunded_twice():
    captured = {ORDER_1: rules.Payment(ORDER_1, "ada", 100, rules.CAPTURED, "within limit 500")}
    failed = shipment(rules.SHIPMENT_FAILED)
    done = rules.settle_payments(captured, [cancelled(), failed])
    assert done.changed[ORDER_1].status == rules.REFUNDED
    assert [r.event_type for r in done.replies] == [rules.PAYMENT_REFUNDED]
    assert [a for _, a, _ in done.log] == ["refunded", "refund-owed"]
    other_way = rules.settle_payments(captured, [failed, cancelled()])
    assert [r.event_type for r in other_way.replies] == [rules.PAYMENT_REFUNDED]
