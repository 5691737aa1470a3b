"""The payments handlers' decisions with a fake unit of work (no database): which event each
order leads to. The same handlers run on the real stack in tests/e2e."""

from __future__ import annotations

from typing import Any

import pytest

from outbox import Envelope
from saga import payments, rules


class FakeResult:
    def __init__(self, row: Any = None) -> None:
        self.row = row

    def first(self) -> Any:
        return self.row


class FakeSession:
    """Records statements; every query answers ``row``."""

    def __init__(self, row: Any = None) -> None:
        self.statements: list[Any] = []
        self.row = row

    def execute(self, statement: Any) -> FakeResult:
        self.statements.append(statement)
        return FakeResult(self.row)


class FakeUnitOfWork:
    def __init__(self, row: Any = None) -> None:
        self.session = FakeSession(row)
        self.published: list[dict[str, Any]] = []

    def publish(self, **event: Any) -> None:
        self.published.append(event)


def placed(customer: str, amount: int) -> Envelope:
    order_id = "00000000-0000-4000-8000-000000000007"
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
    uow = FakeUnitOfWork()
    payments.on_order_placed(placed(customer, amount), uow)  # type: ignore[arg-type]
    (event,) = uow.published
    assert event["event_type"] == expected
    assert event["aggregate_type"] == rules.PAYMENT
    assert event["aggregate_id"] == event["payload"]["order_id"]
    assert event["payload"]["items"] == [{"sku": "widget", "qty": 1}]  # shipping needs them
    assert len(uow.session.statements) == 2  # the payment row and its log entry


def test_a_refund_needs_a_captured_payment():
    class Row:
        status, amount = payments.DECLINED, 40

    failed = Envelope(rules.SHIPMENT, "o-1", rules.SHIPMENT_FAILED, {"order_id": "o-1"})
    uow = FakeUnitOfWork(Row())
    with pytest.raises(ValueError, match="payment is DECLINED"):
        payments.on_shipment_failed(failed, uow)  # type: ignore[arg-type]
    assert uow.published == []


def test_a_failed_shipment_refunds_a_captured_payment():
    class Row:
        status, amount = payments.CAPTURED, 40

    failed = Envelope(
        rules.SHIPMENT, "o-1", rules.SHIPMENT_FAILED, {"order_id": "o-1", "reason": "no stock"}
    )
    uow = FakeUnitOfWork(Row())
    payments.on_shipment_failed(failed, uow)  # type: ignore[arg-type]
    (event,) = uow.published
    assert event["event_type"] == rules.PAYMENT_REFUNDED
    assert event["payload"] == {"order_id": "o-1", "amount": 40, "reason": "no stock"}
