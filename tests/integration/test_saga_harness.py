"""The example saga (orders, payments, shipping) in `outboxkit.testing.Harness`: its three apps
and consumer jobs built by their own factories from the environment, on one fresh database, each
outcome's final states read through the services' HTTP APIs, every event applied once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from outboxkit.testing import Harness
from outboxkit_workshop.devstack.stack import Stack
from outboxkit_workshop.saga import jobs, orders, payments, rules, shipping

SERVICES = ("orders", "payments", "shipping")


@pytest.fixture
def saga(stack: Stack) -> Iterator[Harness]:
    with Harness(
        stack.database_url(),
        services=[orders.app, payments.app, shipping.app],
        jobs=[jobs.orders, jobs.payments, jobs.shipping],
        env_prefixes=SERVICES,
        fresh_database=True,
    ) as h:
        shipping.set_stock(h.engine, {"sku-1": 5, "sku-rare": 1})
        yield h


def place(h: Harness, amount: int, sku: str = "sku-1", qty: int = 2) -> str:
    order = {"customer": "c-1", "items": [{"sku": sku, "qty": qty}], "amount": amount}
    response = h.client("orders").post("/orders", json=order)
    assert response.status_code == 201, response.text
    order_id: str = response.json()["id"]
    return order_id


def states(h: Harness, order_id: str) -> dict[str, Any]:
    """The order's status, its payments' and its shipments', as the services report them."""
    order = h.client("orders").get(f"/orders/{order_id}").json()
    paid = h.client("payments").get("/payments", params={"order_id": order_id}).json()
    shipped = h.client("shipping").get("/shipments", params={"order_id": order_id}).json()
    return {
        "order": order["status"],
        "payments": [p["status"] for p in paid],
        "shipments": [s["status"] for s in shipped],
    }


def events(h: Harness, order_id: str) -> list[str]:
    return [e.event_type for e in h.published() if e.payload.get("order_id") == order_id]


def stock(h: Harness, sku: str) -> int:
    with h.engine.connect() as conn:
        query = shipping.stock.select().where(shipping.stock.c.sku == sku)
        available: int = conn.execute(query).one().available
    return available


def test_an_order_within_credit_and_stock_is_shipped(saga: Harness) -> None:
    order_id = place(saga, amount=100)
    saga.settle()
    assert states(saga, order_id) == {
        "order": rules.SHIPPED,
        "payments": [rules.CAPTURED],
        "shipments": [rules.SCHEDULED],
    }
    assert events(saga, order_id) == ["OrderPlaced", "PaymentCaptured", "ShipmentScheduled"]
    assert stock(saga, "sku-1") == 3
    saga.advance(hours=1)  # past every timeout: a shipped order's timers were cancelled
    assert states(saga, order_id)["order"] == rules.SHIPPED
    assert len(events(saga, order_id)) == 3
    saga.assert_applied_once()


def test_a_declined_payment_cancels_the_order(saga: Harness) -> None:
    order_id = place(saga, amount=rules.STANDARD_LIMIT + 1)
    saga.settle()
    assert states(saga, order_id) == {
        "order": rules.CANCELLED,
        "payments": [rules.DECLINED],
        "shipments": [],
    }
    assert events(saga, order_id) == ["OrderPlaced", "PaymentDeclined"]
    assert stock(saga, "sku-1") == 5
    saga.assert_applied_once()


def test_out_of_stock_refunds_the_payment_and_cancels_the_order(saga: Harness) -> None:
    order_id = place(saga, amount=100, sku="sku-rare", qty=2)
    saga.settle()
    assert states(saga, order_id) == {
        "order": rules.CANCELLED,
        "payments": [rules.REFUNDED],
        "shipments": [rules.FAILED],
    }
    assert events(saga, order_id) == [
        "OrderPlaced",
        "PaymentCaptured",
        "ShipmentFailed",
        "PaymentRefunded",
    ]
    assert stock(saga, "sku-rare") == 1
    saga.assert_applied_once()


def test_a_payment_held_past_its_timeout_is_refunded_and_its_shipment_cancelled(
    saga: Harness,
) -> None:
    """The payment answers late: the order's timer cancels it first; the capture that follows
    is refunded, and the shipment scheduled for it is cancelled with its stock returned."""
    order_id = place(saga, amount=100)
    saga.hold(topic="outbox.event.payment")  # payments' replies do not arrive yet
    saga.settle()
    assert states(saga, order_id)["order"] == rules.PENDING
    saga.advance(seconds=121)  # past the payment timeout (120 s by default)
    assert states(saga, order_id)["order"] == rules.CANCELLED
    saga.release_held()
    saga.settle()
    assert states(saga, order_id) == {
        "order": rules.CANCELLED,
        "payments": [rules.REFUNDED],
        "shipments": [rules.SHIPMENT_VOID],
    }
    assert stock(saga, "sku-1") == 5
    assert sorted(events(saga, order_id)) == sorted(
        [
            "OrderPlaced",
            "PaymentTimedOut",
            "OrderCancelled",
            "PaymentCaptured",
            "PaymentRefunded",
            "ShipmentScheduled",
            "ShipmentCancelled",
        ]
    )
    saga.assert_applied_once()
