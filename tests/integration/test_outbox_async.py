"""The outbox from an ``async`` service (`outbox.AsyncUnitOfWork` on an AsyncSession, psycopg's
async driver), on the stack's Postgres: in every mode the event commits and rolls back with the
business rows; delete mode's row rides in the commit's round trip as it does for a synchronous
session; a commit the server refuses fails the whole transaction; scheduling and cancelling
work; validation and its errors are the synchronous ones."""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from psycopg import pq
from sqlalchemy import create_engine, text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession
from sqlalchemy.orm import Session

from migrations import runner
from outbox import (
    AsyncUnitOfWork,
    InvalidEvent,
    Outbox,
    OutboxError,
    async_engine_for,
    attach_at_commit,
)
from tests.integration.test_outbox_at_commit import SEEN, business, observed, seen

Work = Callable[[AsyncEngine], Awaitable[Any]]


@pytest.fixture
def url(empty_database: str) -> Iterator[str]:
    runner.upgrade(empty_database)
    setup = create_engine(empty_database)
    with setup.begin() as conn:
        conn.exec_driver_sql(SEEN)
    setup.dispose()
    yield empty_database


def run(url: str, work: Work, **options: Any) -> Any:
    """``work`` on a service's async engine of ONE connection, attached for the write at
    commit (as the service template attaches its engines)."""

    async def main() -> Any:
        engine = attach_at_commit(
            async_engine_for(url, "service", pool_size=1, max_overflow=0, **options)
        )
        try:
            return await work(engine)
        finally:
            await engine.dispose()

    return asyncio.run(main())


async def place(session: AsyncSession, order: str, mode: str = "delete", **outbox: Any) -> None:
    await session.execute(text("INSERT INTO business VALUES (:id)"), {"id": order})
    unit = AsyncUnitOfWork(session, Outbox(mode, **outbox))
    await unit.publish(
        aggregate_type="order", aggregate_id=order, event_type="Placed", payload={"n": order}
    )


def test_the_row_rides_in_the_commits_round_trip(url: str) -> None:
    sync_engine = create_engine(url)

    async def work(engine: AsyncEngine) -> list[str]:
        with tempfile.TemporaryFile("w+") as trace:
            async with AsyncSession(engine) as session, session.begin():
                await place(session, "a-1")
                assert seen(sync_engine) == []  # nothing written before the commit
                raw = await session.connection()
                driver = (await raw.get_raw_connection()).driver_connection
                driver.pgconn.trace(trace.fileno())
                driver.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
            driver.pgconn.untrace()
            trace.seek(0)
            return [line for line in trace if line.split("\t")[0] == "F"]

    sent = run(url, work)
    assert len(sent) == 1 and "outbox_write_deleted" in sent[0] and "COMMIT" in sent[0], sent
    assert seen(sync_engine) == ["a-1"] and business(sync_engine) == ["a-1"]
    assert observed(sync_engine, "SELECT count(*)::text FROM outbox") == ["0"]
    sync_engine.dispose()


@pytest.mark.parametrize(
    ("mode", "options"),
    [("delete", {}), ("delete", {"at_commit": False}), ("retain", {})],
)
def test_events_commit_and_roll_back_with_the_business_rows(
    url: str, mode: str, options: dict[str, Any]
) -> None:
    sync_engine = create_engine(url)

    async def work(engine: AsyncEngine) -> None:
        async with AsyncSession(engine) as session, session.begin():
            await place(session, "kept", mode, **options)
        with pytest.raises(RuntimeError):
            async with AsyncSession(engine) as session, session.begin():
                await place(session, "rolled-back", mode, **options)
                raise RuntimeError("the business step failed")
        async with AsyncSession(engine) as session, session.begin():
            await place(session, "outer", mode, **options)
            with pytest.raises(RuntimeError):
                async with session.begin_nested():
                    await place(session, "inner", mode, **options)
                    raise RuntimeError("the savepoint's step failed")

    run(url, work)
    assert seen(sync_engine) == ["kept", "outer"]
    assert business(sync_engine) == ["kept", "outer"]
    left = observed(sync_engine, "SELECT aggregateid FROM outbox ORDER BY created_at")
    assert left == (["kept", "outer"] if mode == "retain" else [])
    sync_engine.dispose()


def test_message_mode_emits_a_transactional_message(url: str) -> None:
    slot = f"it_async_{uuid.uuid4().hex[:8]}"
    sync_engine = create_engine(url, isolation_level="AUTOCOMMIT")
    with sync_engine.connect() as conn:
        conn.execute(
            text("SELECT pg_create_logical_replication_slot(:s, 'test_decoding')"), {"s": slot}
        )
    try:

        async def work(engine: AsyncEngine) -> None:
            async with AsyncSession(engine) as session, session.begin():
                await place(session, "m-1", "message", message_prefix="outboxkit-it")
            with pytest.raises(RuntimeError):
                async with AsyncSession(engine) as session, session.begin():
                    await place(session, "m-2", "message", message_prefix="outboxkit-it")
                    raise RuntimeError("rolled back")

        run(url, work)
        with sync_engine.connect() as conn:
            changes = list(
                conn.execute(
                    text("SELECT data FROM pg_logical_slot_get_changes(:s, NULL, NULL)"),
                    {"s": slot},
                ).scalars()
            )
    finally:
        with sync_engine.connect() as conn:
            conn.execute(text("SELECT pg_drop_replication_slot(:s)"), {"s": slot})
        sync_engine.dispose()
    messages = [c for c in changes if c.startswith("message:") and "outboxkit-it" in c]
    assert len(messages) == 1 and '"m-1"' in messages[0], changes
    assert not any('"m-2"' in c for c in changes)


def test_a_commit_the_server_refuses_fails_the_transaction(url: str) -> None:
    sync_engine = create_engine(url)

    async def work(engine: AsyncEngine) -> None:
        with pytest.raises(OutboxError, match="outbox_write_deleted"):
            async with AsyncSession(engine) as session, session.begin():
                await place(session, "lost")
                await session.execute(text("SET LOCAL search_path TO pg_temp"))
        async with AsyncSession(engine) as session, session.begin():  # the connection is fine
            await place(session, "kept")

    run(url, work)
    assert business(sync_engine) == ["kept"] and seen(sync_engine) == ["kept"]
    sync_engine.dispose()


def test_scheduled_messages_are_written_and_cancelled_in_the_transaction(url: str) -> None:
    sync_engine = create_engine(url)

    async def work(engine: AsyncEngine) -> int:
        async with AsyncSession(engine) as session, session.begin():
            unit = AsyncUnitOfWork(session)
            for key in ("t-1", "t-2"):
                await unit.schedule(
                    aggregate_type="order", aggregate_id=key, event_type="TimedOut",
                    payload={}, delay=60, key=key,
                )  # fmt: skip
        async with AsyncSession(engine) as session, session.begin():
            return await AsyncUnitOfWork(session).cancel_scheduled("t-1", "absent")

    assert run(url, work) == 1
    assert observed(sync_engine, "SELECT key FROM outbox_scheduled") == ["t-2"]
    sync_engine.dispose()


def test_validation_and_its_errors_are_the_synchronous_ones(url: str) -> None:
    async def work(engine: AsyncEngine) -> None:
        async with AsyncSession(engine) as session, session.begin():
            unit = AsyncUnitOfWork(session)
            with pytest.raises(InvalidEvent, match="JSON"):
                await unit.publish(
                    aggregate_type="order", aggregate_id="x", event_type="Placed",
                    payload={"not json": object()},
                )  # fmt: skip
            with pytest.raises(InvalidEvent, match=r"outbox\.AsyncUnitOfWork"):
                Outbox().publish(
                    session,  # type: ignore[arg-type]
                    aggregate_type="order", aggregate_id="x", event_type="Placed", payload={},
                )  # fmt: skip
        with pytest.raises(TypeError, match="AsyncSession"):
            AsyncUnitOfWork(Session())  # type: ignore[arg-type]

    run(url, work)


def test_a_publish_first_then_a_savepoint_stays_in_its_transaction(url: str) -> None:
    """The transaction's first step is a publish, then a savepoint: refused afterwards, the
    transaction keeps nothing (the waiting row went with a BEGIN, not on its own)."""
    sync_engine = create_engine(url)

    async def work(engine: AsyncEngine) -> None:
        with pytest.raises(RuntimeError):
            async with AsyncSession(engine) as session, session.begin():
                unit = AsyncUnitOfWork(session, Outbox("delete"))
                await unit.publish(
                    aggregate_type="order", aggregate_id="first", event_type="Placed", payload={}
                )
                async with session.begin_nested():
                    await session.execute(text("INSERT INTO business VALUES ('first')"))
                raise RuntimeError("the route refuses the request (422)")
        async with AsyncSession(engine) as session, session.begin():
            await place(session, "kept")

    run(url, work)
    assert seen(sync_engine) == ["kept"] and business(sync_engine) == ["kept"]
    sync_engine.dispose()


SLOW = """
CREATE FUNCTION outbox_slow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.aggregateid = 'slow' THEN PERFORM pg_sleep(2); END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER outbox_slow BEFORE INSERT ON outbox FOR EACH ROW EXECUTE FUNCTION outbox_slow();
"""


def test_a_commit_cancelled_while_the_outbox_call_runs_leaves_the_pool_sound(url: str) -> None:
    """A request timeout cancels the commit while the outbox's call waits (a slow trigger): the
    connection is not given back inside a transaction (the pool's one connection serves the
    next transaction), and the cancelled one is all or nothing."""
    sync_engine = create_engine(url)
    with sync_engine.begin() as conn:
        conn.exec_driver_sql(SLOW)

    async def work(engine: AsyncEngine) -> None:
        session = AsyncSession(engine)
        await session.begin()
        await place(session, "slow")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(session.commit(), 0.3)
        with contextlib.suppress(Exception):
            await session.close()
        async with AsyncSession(engine) as session, session.begin():
            await place(session, "after-cancel")

    run(url, work, pool_timeout=5)
    assert "after-cancel" in business(sync_engine) and "after-cancel" in seen(sync_engine)
    assert ("slow" in business(sync_engine)) == ("slow" in seen(sync_engine))
    sync_engine.dispose()
