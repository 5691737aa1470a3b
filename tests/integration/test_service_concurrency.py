"""Synchronous routes beside async ones under more concurrent requests than the thread pool has
threads, on a real uvicorn and Postgres: every request answered, none with a 503 the database
did not cause (a sync route's transaction is finished in a thread: a request waiting for a
connection must never hold the thread another needs to give its connection back)."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Annotated

import httpx
import pytest
import uvicorn
from anyio import to_thread
from fastapi import Depends
from sqlalchemy import text

from migrations import runner
from outbox import AsyncUnitOfWork, UnitOfWork
from outboxkit.kernel.engines import async_engine_for, engine_for
from outboxkit_workshop.devstack.processes import free_port, wait_until
from service_template import (
    ServiceSettings,
    async_service_router,
    async_unit_of_work,
    create_app,
    service_router,
    unit_of_work,
)

pytestmark = pytest.mark.integration

sync_routes = service_router()
async_routes = async_service_router()


@sync_routes.post("/sync/{n}")
def write_sync(n: str, uow: Annotated[UnitOfWork, Depends(unit_of_work)]) -> dict[str, str]:
    uow.session.execute(text("INSERT INTO business VALUES (:n)"), {"n": n})
    uow.publish(aggregate_type="item", aggregate_id=n, event_type="Written", payload={})
    return {"id": n}  # not a built Response: the transaction is finished in a second hop


@async_routes.post("/async/{n}")
async def write_async(
    n: str, uow: Annotated[AsyncUnitOfWork, Depends(async_unit_of_work)]
) -> dict[str, str]:
    await uow.session.execute(text("INSERT INTO business VALUES (:n)"), {"n": n})
    await uow.publish(aggregate_type="item", aggregate_id=n, event_type="Written", payload={})
    return {"id": n}


@pytest.fixture
def served(empty_database: str) -> Iterator[tuple[int, str]]:
    """The app on uvicorn, with small pools (2 connections each, 3 s to wait for one) and the
    default thread pool (40)."""
    runner.upgrade(empty_database)
    engine = engine_for(empty_database, "service", pool_size=2, max_overflow=0, pool_timeout=3)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE business (id text PRIMARY KEY)"))
    async_engine = async_engine_for(
        empty_database, "service", pool_size=2, max_overflow=0, pool_timeout=3
    )
    settings = ServiceSettings(name="mixed", database_url=empty_database, log_json=False)
    app = create_app(
        settings, routers=[sync_routes, async_routes], engine=engine, async_engine=async_engine
    )
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until("uvicorn serving", lambda: server.started, timeout=30)
    yield port, empty_database
    server.should_exit = True
    thread.join(30)
    engine.dispose()


def test_sync_and_async_routes_at_four_times_the_threads_answer_every_request(served):
    port, url = served
    requests = 4 * 40  # anyio's default thread pool, which uvicorn's app runs sync code in

    async def main() -> list[int]:
        assert to_thread.current_default_thread_limiter().total_tokens == 40
        limits = httpx.Limits(max_connections=requests)
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", limits=limits, timeout=60
        ) as client:

            async def one(i: int) -> int:
                kind = "sync" if i % 2 == 0 else "async"
                response = await client.post(f"/{kind}/{uuid.uuid4().hex}")
                return response.status_code

            return await asyncio.gather(*(one(i) for i in range(requests)))

    statuses = Counter(asyncio.run(main()))
    assert statuses == {200: requests}, statuses
    engine = engine_for(url, "once")
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT count(*) FROM business")).scalar_one()
    engine.dispose()
    assert rows == requests
