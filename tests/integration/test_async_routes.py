"""``async def`` routes beside synchronous ones in one app, on real Postgres: an async route's
business row and its event commit together after a successful response and not at all after an
error status or an exception; an Idempotency-Key gives a retry the first response and creates
nothing, another body under it a 409; a lost database is a 503; health, readiness and metrics
answer as for a synchronous service."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from fastapi import Depends, Request
from fastapi.testclient import TestClient
from pydantic import BaseModel
from sqlalchemy import create_engine, text

from outboxkit_workshop.saga.common import migrations_of
from service_template import (
    AsyncUnitOfWork,
    IdempotencyKey,
    ServiceSettings,
    UnitOfWork,
    async_service_router,
    async_unit_of_work,
    create_app,
    idempotent_async,
    service_router,
    unit_of_work,
)

aio = async_service_router()
sync = service_router()
AUoW = Annotated[AsyncUnitOfWork, Depends(async_unit_of_work)]
UoW = Annotated[UnitOfWork, Depends(unit_of_work)]


class Order(BaseModel):
    id: str
    amount: int


async def _place(uow: AsyncUnitOfWork, order: Order) -> tuple[int, Any]:
    await uow.session.execute(
        text("INSERT INTO async_orders (id, amount) VALUES (:id, :amount)"), order.model_dump()
    )
    await uow.publish(
        aggregate_type="order", aggregate_id=order.id, event_type="OrderPlaced",
        payload=order.model_dump(),
    )  # fmt: skip
    return 201, {"id": order.id}


@aio.post("/async/orders", status_code=201)
async def place(order: Order, request: Request, uow: AUoW, key: IdempotencyKey = None) -> Any:
    if order.amount < 0:
        await _place(uow, order)  # written, then refused: nothing may stay
        from service_template import Problem

        raise Problem(422, "a negative amount")
    return await idempotent_async(uow, request, key, order.model_dump(), lambda: _place(uow, order))


@sync.post("/sync/orders", status_code=201)
def place_sync(order: Order, uow: UoW) -> dict[str, str]:
    uow.session.execute(
        text("INSERT INTO async_orders (id, amount) VALUES (:id, :amount)"), order.model_dump()
    )
    uow.publish(
        aggregate_type="order", aggregate_id=order.id, event_type="OrderPlaced",
        payload=order.model_dump(),
    )  # fmt: skip
    return {"id": order.id}


SEEN = """
CREATE TABLE IF NOT EXISTS async_orders (id text PRIMARY KEY, amount int);
CREATE TABLE IF NOT EXISTS async_seen (n bigserial PRIMARY KEY, aggregateid text);
CREATE OR REPLACE FUNCTION async_seen() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO async_seen (aggregateid) VALUES (NEW.aggregateid); RETURN NEW; END $$;
DROP TRIGGER IF EXISTS async_seen ON outbox;
CREATE TRIGGER async_seen AFTER INSERT ON outbox FOR EACH ROW EXECUTE FUNCTION async_seen();
"""


@pytest.fixture(scope="module")
def served(stack):
    url = stack.add_service("async_routes")
    migrations_of("orders").upgrade(url)
    admin = create_engine(url)
    with admin.begin() as conn:
        conn.exec_driver_sql(SEEN)
    settings = ServiceSettings(
        name="async-routes",
        database_url=url,
        log_json=False,
        outbox={"release": {"enabled": False}},  # type: ignore[arg-type]
    )
    app = create_app(settings, routers=[aio, sync])
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client, admin
    admin.dispose()


@pytest.fixture
def superuser(stack, served):
    engine = create_engine(stack.database_url())
    yield engine, served[1].url.database
    engine.dispose()


def rows(admin: Any, sql: str) -> list[Any]:
    with admin.connect() as conn:
        return list(conn.execute(text(sql)).scalars())


def test_async_and_sync_routes_commit_their_rows_with_their_events(served) -> None:
    client, admin = served
    assert client.post("/async/orders", json={"id": "a-1", "amount": 5}).status_code == 201
    assert client.post("/sync/orders", json={"id": "s-1", "amount": 5}).status_code == 201
    assert client.post("/async/orders", json={"id": "a-2", "amount": -1}).status_code == 422
    assert rows(admin, "SELECT id FROM async_orders ORDER BY id") == ["a-1", "s-1"]
    assert rows(admin, "SELECT aggregateid FROM async_seen ORDER BY n") == ["a-1", "s-1"]
    assert rows(admin, "SELECT count(*) FROM outbox") == [0]  # delete mode


def test_an_idempotency_key_answers_a_retry_with_the_first_response(served) -> None:
    client, admin = served
    headers = {"Idempotency-Key": "k-1"}
    first = client.post("/async/orders", json={"id": "i-1", "amount": 3}, headers=headers)
    again = client.post("/async/orders", json={"id": "i-1", "amount": 3}, headers=headers)
    other = client.post("/async/orders", json={"id": "i-2", "amount": 3}, headers=headers)
    assert (first.status_code, again.status_code, other.status_code) == (201, 201, 409)
    assert again.json() == first.json() and again.headers["Idempotent-Replayed"] == "true"
    assert other.headers["content-type"].startswith("application/problem+json")
    assert rows(admin, "SELECT aggregateid FROM async_seen WHERE aggregateid LIKE 'i-%'") == ["i-1"]
    bad = client.post(
        "/async/orders", json={"id": "i-3", "amount": 3}, headers={"Idempotency-Key": "k" * 300}
    )
    assert bad.status_code == 400


def test_health_readiness_and_metrics_answer(served) -> None:
    client, _ = served
    assert client.get("/health").status_code == 200
    assert client.get("/ready").json()["status"] == "ready"
    assert "outboxkit" in client.get("/metrics").text


def test_a_lost_database_is_a_503_and_the_next_request_works(served, superuser) -> None:
    client, _ = served
    engine, database = superuser
    with engine.begin() as conn:  # end every session on the service's database
        ended = conn.execute(
            text(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = :db AND pid <> pg_backend_pid()"
            ),
            {"db": database},
        ).scalar_one()
    assert ended >= 1  # the async engine's pooled connection among them
    answers = [
        client.post("/async/orders", json={"id": f"l-{n}", "amount": 1}).status_code
        for n in range(3)
    ]
    assert set(answers) <= {201, 503} and answers[-1] == 201, answers
    assert 500 not in answers


@pytest.mark.parametrize("routes", ["async", "sync"])
def test_the_orders_service_answers_alike_on_async_and_sync_routes(stack, routes: str) -> None:
    """The saga's orders service, its routes async (the saga's) or synchronous (the service
    benchmark's other side): the same 201, the same retry, the same view, one event and one
    timer per order."""
    from outboxkit_workshop.saga import orders, orders_sync

    url = stack.add_service(f"orders_{routes}")
    migrations_of("orders").upgrade(url)
    admin = create_engine(url)
    with admin.begin() as conn:
        conn.exec_driver_sql(SEEN)
    settings = ServiceSettings(
        name=f"orders-{routes}",
        database_url=url,
        log_json=False,
        outbox={"release": {"enabled": False}},  # type: ignore[arg-type]
    )
    router = orders.router if routes == "async" else orders_sync.router
    app = create_app(settings, routers=[router], migrations=[migrations_of("orders")])
    body = {"customer": "cust-1", "items": [{"sku": "widget", "qty": 2}], "amount": 40}
    with TestClient(app) as client:
        first = client.post("/orders", json=body, headers={"Idempotency-Key": "o-1"})
        again = client.post("/orders", json=body, headers={"Idempotency-Key": "o-1"})
        view = client.get(f"/orders/{first.json()['id']}")
        missing = client.get("/orders/00000000-0000-4000-8000-000000000000")
    assert (first.status_code, again.status_code, view.status_code) == (201, 201, 200)
    assert again.json() == first.json()
    assert view.json()["timeline"] == first.json()["timeline"]
    assert missing.status_code == 404
    order = first.json()["id"]
    assert rows(admin, "SELECT aggregateid FROM async_seen") == [order]
    assert rows(admin, "SELECT aggregateid FROM outbox_scheduled") == [order]
    admin.dispose()
