"""The saga's batch handlers without a database: the pure folds decide (which event each order
leads to, in offset order through a slice), and each handler writes a slice in a constant number
of statements (a fake session counts them and compiles them for Postgres). The same handlers run
on the real stack in tests/e2e."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy.dialects.postgresql import psycopg

from outbox import Envelope
from outboxkit_workshop.saga import orders, payments, rules, shipping

ORDER_1 = "00000000-0000-4000-8000-000000000001"
ORDER_2 = "00000000-0000-4000-8000-000000000002"
ORDER_3 = "00000000-0000-4000-8000-000000000003"


def placed(customer: str, amount: int, order_id: str = ORDER_1) -> Envelope:
    return Envelope(
        aggregate_type=rules.ORDER,
        aggregate_id=order_id,
        event_type=rules.ORDER_PLACED,
        payload={
            "order_id": order_id,
            "customer": customer,
            "amount": amount,
            "items": [{"sku": "widget", "qty": 1}],
        },
    )


def shipment(event_type: str, order_id: str = ORDER_1, reason: str = "no stock") -> Envelope:
    payload = {"order_id": order_id, "reason": reason}
    return Envelope(rules.SHIPMENT, order_id, event_type, payload)


def payment(event_type: str, order_id: str = ORDER_1, **items: int) -> Envelope:
    payload = {"order_id": order_id, "items": [{"sku": s, "qty": q} for s, q in items.items()]}
    return Envelope(rules.PAYMENT, order_id, event_type, payload)


def captured(order_id: str, **items: int) -> Envelope:
    return payment(rules.PAYMENT_CAPTURED, order_id, **items)


def a_payment(status: str, order_id: str = ORDER_1, amount: int = 40) -> rules.Payment:
    return rules.Payment(order_id, "cust-1", amount, status, "within limit 500")


# -- payments ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("customer", "amount", "expected"),
    [
        ("cust-1", 500, rules.PAYMENT_CAPTURED),
        ("cust-1", 501, rules.PAYMENT_DECLINED),
        ("vip-1", 1000, rules.PAYMENT_CAPTURED),
        ("vip-1", 1001, rules.PAYMENT_DECLINED),
    ],
)
def test_an_order_is_captured_within_the_credit_limit(customer, amount, expected):
    event = placed(customer, amount)
    done = rules.settle_payments({}, [event])
    (reply,) = done.replies
    assert (reply.event_type, reply.aggregate_type, reply.cause) == (expected, rules.PAYMENT, event)
    assert reply.order_id == reply.payload["order_id"] == ORDER_1
    assert reply.payload["items"] == [{"sku": "widget", "qty": 1}]  # shipping needs them
    status = rules.CAPTURED if expected == rules.PAYMENT_CAPTURED else rules.DECLINED
    assert done.created[ORDER_1].status == status
    assert done.log == [(ORDER_1, status.lower(), event)] and done.changed == {}


@pytest.mark.parametrize(
    ("known", "message"),
    [({ORDER_1: a_payment(rules.DECLINED)}, "payment is DECLINED"), ({}, "payment is None")],
)
def test_a_refund_needs_a_captured_payment(known, message):
    with pytest.raises(ValueError, match=message):
        rules.settle_payments(known, [shipment(rules.SHIPMENT_FAILED)])


def test_a_failed_shipment_refunds_a_captured_payment():
    done = rules.settle_payments(
        {ORDER_1: a_payment(rules.CAPTURED)}, [shipment(rules.SHIPMENT_FAILED)]
    )
    (reply,) = done.replies
    assert reply.event_type == rules.PAYMENT_REFUNDED
    assert reply.payload == {"order_id": ORDER_1, "amount": 40, "reason": "no stock"}
    refunded = done.changed[ORDER_1]
    assert (refunded.status, refunded.reason) == (rules.REFUNDED, "refunded: no stock")
    assert done.created == {}


def test_an_order_placed_and_refunded_in_one_slice_is_written_once_as_refunded():
    events = [placed("cust-1", 40), shipment(rules.SHIPMENT_FAILED)]
    done = rules.settle_payments({}, events)
    assert done.created[ORDER_1].status == rules.REFUNDED and done.changed == {}
    assert [action for _, action, _ in done.log] == ["captured", "refunded"]
    assert [r.event_type for r in done.replies] == [
        rules.PAYMENT_CAPTURED,
        rules.PAYMENT_REFUNDED,
    ]


def test_a_refund_in_the_slice_before_its_order_is_placed_raises():
    with pytest.raises(ValueError, match="payment is None"):
        rules.settle_payments({}, [shipment(rules.SHIPMENT_FAILED), placed("cust-1", 40)])


def test_a_declined_order_refunded_later_in_the_slice_raises():
    with pytest.raises(ValueError, match="payment is DECLINED"):
        rules.settle_payments({}, [placed("cust-1", 501), shipment(rules.SHIPMENT_FAILED)])


def test_an_order_placed_twice_in_one_slice_raises():
    with pytest.raises(ValueError, match="already has a payment"):
        rules.settle_payments({}, [placed("cust-1", 40), placed("cust-1", 40)])


def test_a_scheduled_shipment_changes_no_payment():
    done = rules.settle_payments({}, [shipment(rules.SHIPMENT_SCHEDULED)])
    assert (done.created, done.changed, done.log, done.replies) == ({}, {}, [], [])


# -- orders -----------------------------------------------------------------------------------


def test_events_of_one_order_move_it_in_offset_order():
    events = [payment(rules.PAYMENT_CAPTURED), shipment(rules.SHIPMENT_SCHEDULED)]
    moves = rules.follow_orders({ORDER_1: rules.PENDING}, events)
    assert moves.statuses == {ORDER_1: rules.SHIPPED}
    assert moves.timeline == [(events[0], rules.PAID), (events[1], rules.SHIPPED)]


def test_a_shipment_applied_before_its_payment_is_not_undone_by_it():
    events = [shipment(rules.SHIPMENT_SCHEDULED), payment(rules.PAYMENT_CAPTURED)]
    moves = rules.follow_orders({ORDER_1: rules.PENDING}, events)
    assert moves.statuses == {ORDER_1: rules.SHIPPED}
    assert [status for _, status in moves.timeline] == [rules.SHIPPED, rules.SHIPPED]


def test_only_the_orders_that_moved_are_written():
    events = [shipment(rules.SHIPMENT_FAILED, ORDER_1), payment(rules.PAYMENT_DECLINED, ORDER_2)]
    moves = rules.follow_orders({ORDER_1: rules.PAID, ORDER_2: rules.PENDING}, events)
    assert moves.statuses == {ORDER_2: rules.CANCELLED}
    assert [status for _, status in moves.timeline] == [rules.PAID, rules.CANCELLED]


def test_an_event_of_an_unknown_order_raises():
    with pytest.raises(ValueError, match=f"for unknown order {ORDER_2}"):
        rules.follow_orders({ORDER_1: rules.PENDING}, [payment(rules.PAYMENT_CAPTURED, ORDER_2)])


# -- shipping ---------------------------------------------------------------------------------


def test_stock_running_out_midway_fails_only_the_orders_it_cannot_serve():
    events = [captured(ORDER_1, widget=2), captured(ORDER_2, widget=2), captured(ORDER_3, widget=1)]
    done = rules.reserve_stock({"widget": 3}, events)
    assert [(s.order_id, s.status) for s in done.shipments] == [
        (ORDER_1, rules.SCHEDULED),
        (ORDER_2, rules.FAILED),
        (ORDER_3, rules.SCHEDULED),
    ]
    assert done.taken == {"widget": 3} and done.available == {"widget": 0}
    assert [r.event_type for r in done.replies] == [
        rules.SHIPMENT_SCHEDULED,
        rules.SHIPMENT_FAILED,
        rules.SHIPMENT_SCHEDULED,
    ]
    assert done.replies[1].payload == {"order_id": ORDER_2, "reason": "out of stock: widget"}


def test_an_order_reserves_every_item_or_none():
    events = [captured(ORDER_1, widget=1, gadget=5, bolt=1), captured(ORDER_2, widget=1)]
    done = rules.reserve_stock({"widget": 1, "gadget": 2}, events)
    assert done.shipments[0].reason == "out of stock: bolt, gadget"  # sorted; unknown SKU: none
    assert done.shipments[1].status == rules.SCHEDULED  # the first took nothing
    assert done.taken == {"widget": 1}


def test_only_captured_payments_want_stock():
    events = [
        payment(rules.PAYMENT_DECLINED, ORDER_1, zeta=1),
        captured(ORDER_2, widget=1, gadget=1),
        payment(rules.PAYMENT_REFUNDED, ORDER_3),
    ]
    assert rules.skus_wanted(events) == ["gadget", "widget"]
    done = rules.reserve_stock({"widget": 1, "gadget": 1}, events)
    assert [s.order_id for s in done.shipments] == [ORDER_2]


# -- the handlers: a constant number of statements per slice ------------------------------


class FakeResult:
    def __init__(self, rows: list[Any]) -> None:
        self.rows = rows

    def all(self) -> list[Any]:
        return self.rows


class FakeSession:
    """Records statements, compiled for Postgres; every query answers ``rows``."""

    def __init__(self, rows: list[Any]) -> None:
        self.statements: list[str] = []
        self.params: list[Any] = []
        self.rows = rows

    def execute(self, statement: Any, params: Any = None) -> FakeResult:
        # Compiled as executing it would, for the parameters' names (an executemany's first row).
        first = params[0] if isinstance(params, list) else params
        keys = list(first or {})
        self.statements.append(str(statement.compile(dialect=psycopg.dialect(), column_keys=keys)))
        self.params.append(params)
        return FakeResult(self.rows)


class FakeUnitOfWork:
    def __init__(self, rows: list[Any]) -> None:
        self.session = FakeSession(rows)
        self.published: list[list[Any]] = []
        self.cancelled: list[str] = []
        self.scheduled: list[tuple[Any, Any]] = []

    def publish_many(self, events: list[Any]) -> None:
        self.published.append(events)

    def cancel_scheduled(self, *keys: str) -> int:
        self.cancelled.extend(keys)
        return len(keys)

    def schedule_many(self, events: list[Any], dues: list[Any]) -> None:
        self.scheduled.extend(zip(events, dues, strict=True))


def statements(uow: FakeUnitOfWork) -> list[str]:
    """Each statement as its verb and table, e.g. ``UPDATE stock``."""
    kinds = []
    for sql in uow.session.statements:
        verb, *words = sql.split()
        at = words.index("FROM") + 1 if verb == "SELECT" else 0 if verb == "UPDATE" else 1
        kinds.append(f"{verb} {words[at]}")
    return kinds


def test_the_orders_handler_writes_a_slice_in_three_statements():
    rows = [SimpleNamespace(id=o, status=rules.PENDING) for o in (ORDER_1, ORDER_2, ORDER_3)]
    uow = FakeUnitOfWork(rows)
    events = [payment(rules.PAYMENT_CAPTURED, o) for o in (ORDER_1, ORDER_2, ORDER_3)]
    events.append(shipment(rules.SHIPMENT_SCHEDULED, ORDER_1))
    orders.HANDLERS.apply(events, uow)  # type: ignore[arg-type]
    assert statements(uow) == ["SELECT orders", "UPDATE orders", "INSERT order_timeline"]
    lock, move, _ = uow.session.statements
    assert lock.endswith("FOR UPDATE") and "FROM unnest(" in move
    _, moved, timeline = uow.session.params
    assert moved == {
        "moved_id": [ORDER_1, ORDER_2, ORDER_3],
        "moved_status": [rules.SHIPPED, rules.PAID, rules.PAID],
    }
    assert [row["order_id"] for row in timeline] == [ORDER_1, ORDER_2, ORDER_3, ORDER_1]


def test_the_handlers_statements_are_the_same_for_any_number_of_rows():
    """Rows travel as parameters (arrays, or an executemany's list), never in the statement:
    SQLAlchemy compiles each statement once, not on every slice."""
    seen = []
    for count in (1, 3):
        ids = [ORDER_1, ORDER_2, ORDER_3][:count]
        uow = FakeUnitOfWork([SimpleNamespace(id=o, status=rules.PENDING) for o in ids])
        orders.HANDLERS.apply([payment(rules.PAYMENT_CAPTURED, o) for o in ids], uow)  # type: ignore[arg-type]
        seen.append(uow.session.statements[1:])
        assert len(uow.session.params[2]) == count
    assert seen[0] == seen[1]


def test_the_payments_handler_writes_a_slice_in_constant_statements():
    uow = FakeUnitOfWork([SimpleNamespace(**vars(a_payment(rules.CAPTURED, ORDER_3)))])
    events = [
        placed("cust-1", 40, ORDER_1),
        placed("cust-1", 40, ORDER_2),
        shipment(rules.SHIPMENT_FAILED, ORDER_3),
    ]
    payments.HANDLERS.apply(events, uow)  # type: ignore[arg-type]
    assert statements(uow) == [
        "SELECT payments",
        "INSERT payments",
        "UPDATE payments",
        "INSERT payment_log",
    ]
    (published,) = uow.published  # one publish_many: one INSERT into the outbox
    assert [(e.aggregate_id, e.event_type, e.caused_by) for e in published] == [
        (ORDER_1, rules.PAYMENT_CAPTURED, events[0]),
        (ORDER_2, rules.PAYMENT_CAPTURED, events[1]),
        (ORDER_3, rules.PAYMENT_REFUNDED, events[2]),
    ]


def test_the_shipping_handler_writes_a_slice_in_constant_statements():
    uow = FakeUnitOfWork([("gadget", 1), ("widget", 5)])
    events = [captured(ORDER_1, widget=2, gadget=1), captured(ORDER_2, gadget=1)]
    shipping.HANDLERS.apply(events, uow)  # type: ignore[arg-type]
    assert statements(uow) == ["SELECT stock", "UPDATE stock", "INSERT shipments"]
    (published,) = uow.published
    assert [e.event_type for e in published] == [rules.SHIPMENT_SCHEDULED, rules.SHIPMENT_FAILED]


def test_events_the_handlers_do_not_act_on_write_nothing():
    uow = FakeUnitOfWork([])
    shipping.HANDLERS.apply([payment(rules.PAYMENT_DECLINED)], uow)  # type: ignore[arg-type]
    payments.HANDLERS.apply([shipment(rules.SHIPMENT_SCHEDULED)], uow)  # type: ignore[arg-type]
    assert uow.session.statements == [] and uow.published == [[], []]
