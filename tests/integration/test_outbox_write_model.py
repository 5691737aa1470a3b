"""A model of the write side, checked against the WAL: random transactions of business rows,
publishes in every mode (delete at commit and at publish, retain, message; one event or
several), scheduled messages and their cancels, savepoints (SQLAlchemy's and as SQL text)
released or rolled back, ended by a commit, a rollback, a session closed without either, a
connection killed before the commit, or (async) a cancellation at a random await point of the
transaction, commit included; on a synchronous Session and on an AsyncSession, through ONE
pooled connection, so that what a transaction leaves on it meets the next one.

The oracle reads what committed from a logical replication slot (test_decoding, with the
transaction ids): every transaction the model commits is one transaction of the WAL holding
exactly its surviving business rows and its surviving events in publish order; nothing of a
rolled-back one appears; a transaction whose outcome is unknown (cancelled in its commit)
appears whole or not at all; the scheduled messages pending afterwards are the model's."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, create_engine, make_url, text
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from migrations import runner
from outbox import (
    AsyncUnitOfWork,
    Outbox,
    UnitOfWork,
    async_engine_for,
    attach_at_commit,
)
from outbox.publish import NewEvent
from outboxkit.kernel.engines import engine_for
from outboxkit.kernel.errors import is_transient

pytestmark = pytest.mark.integration

MODES = ("delete", "at_publish", "retain", "message")
PREFIX = "outboxkit-model"

step = st.one_of(
    st.just(("row",)),
    st.tuples(st.just("publish"), st.sampled_from(MODES), st.integers(0, 3)),
    st.tuples(st.just("schedule"), st.integers(0, 2)),
    st.tuples(st.just("cancel"), st.integers(0, 2)),
    st.tuples(st.just("savepoint"), st.sampled_from(("orm", "sql"))),
    st.just(("release",)),
    st.just(("rollback_to",)),
)
ending = st.one_of(
    st.sampled_from([("commit",), ("commit",), ("rollback",), ("close",), ("kill",)]),
    st.tuples(st.just("cancel"), st.integers(0, 30), st.integers(0, 40)),
)
transaction = st.tuples(st.lists(step, max_size=10), ending)


@dataclass
class Frame:
    """What a transaction or savepoint wrote: rows, events in order, schedule operations."""

    rows: list[str] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    schedules: list[tuple[str, str | None]] = field(default_factory=list)  # key, event or None

    def merge(self, inner: Frame) -> None:
        self.rows += inner.rows
        self.events += inner.events
        self.schedules += inner.schedules


@dataclass
class Outcome:
    frame: Frame
    committed: bool | None  # None: unknown (cancelled in its commit)


@pytest.fixture(scope="module")
def database(stack: Any) -> Iterator[tuple[str, str]]:
    """A database of its own with the framework's tables, a business table and a logical slot
    (dropped afterwards)."""
    url = make_url(stack.database_url())
    name = f"model_{uuid.uuid4().hex[:8]}"
    server = create_engine(url.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with server.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    database_url = url.set(database=name).render_as_string(hide_password=False)
    runner.upgrade(database_url)
    observer = create_engine(database_url, isolation_level="AUTOCOMMIT")
    slot = f"it_model_{uuid.uuid4().hex[:8]}"
    with observer.connect() as conn:
        conn.execute(text("CREATE TABLE business (id text PRIMARY KEY)"))
        conn.exec_driver_sql(SLOW)
        conn.execute(
            text("SELECT pg_create_logical_replication_slot(:s, 'test_decoding')"), {"s": slot}
        )
    try:
        yield database_url, slot
    finally:
        with observer.connect() as conn:
            conn.execute(text("SELECT pg_drop_replication_slot(:s)"), {"s": slot})
        observer.dispose()
        with server.connect() as conn:
            conn.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
        server.dispose()


# An event whose id ends in -slow takes 20 ms to write: a cancellation can land in its commit.
SLOW = """
CREATE FUNCTION outbox_slow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF right(NEW.aggregateid, 5) = '-slow' THEN PERFORM pg_sleep(0.02); END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER outbox_slow BEFORE INSERT ON outbox FOR EACH ROW EXECUTE FUNCTION outbox_slow();
"""

ROW = re.compile(r"^table public\.business: INSERT: id\[text\]:'([^']*)'")
EVENT = re.compile(r"^table public\.outbox: INSERT: .*?aggregateid\[[^\]]+\]:'([^']*)'")
MESSAGE = re.compile(
    r"^message: transactional: 1 prefix: " + PREFIX + r'.*"aggregateid": "([^"]*)"'
)


def committed(observer: Engine, slot: str) -> list[Frame]:
    """The transactions decoded since the last call, in commit order: their business rows and
    their events (outbox inserts and messages) in WAL order; transactions without either (the
    scheduled table's, the model's own clean-up) are left out."""
    with observer.connect() as conn:
        lines = conn.execute(
            text(
                "SELECT data FROM pg_logical_slot_get_changes(:s, NULL, NULL, "
                "'include-xids', '1', 'skip-empty-xacts', '0')"
            ),
            {"s": slot},
        ).scalars()
        transactions: list[Frame] = []
        current: Frame | None = None
        for line in lines:
            if line.startswith("BEGIN"):
                current = Frame()
            elif line.startswith("COMMIT"):
                if current is not None and (current.rows or current.events):
                    transactions.append(current)
                current = None
            elif match := ROW.match(line):
                assert current is not None, line
                current.rows.append(match.group(1))
            elif match := EVENT.match(line) or MESSAGE.match(line):
                if current is None:  # a transaction of messages alone: no BEGIN nor COMMIT
                    transactions.append(Frame(events=[match.group(1)]))
                else:
                    current.events.append(match.group(1))
    return transactions


def pending_schedules(observer: Engine) -> dict[str, str]:
    with observer.connect() as conn:
        rows = conn.execute(text("SELECT key, aggregateid FROM outbox_scheduled"))
        return {key: event for key, event in rows}


async def done(value: Any) -> Any:
    """``value`` awaited when the session is async."""
    return await value if inspect.isawaitable(value) else value


class Transaction:
    """One generated transaction run on a session (sync or async), tracked by the model's
    frames: the transaction's, then one per open savepoint."""

    def __init__(self, session: Any, tag: str, observer: Engine) -> None:
        self.session = session
        self.tag = tag
        self.observer = observer
        self.frames = [Frame()]
        self.savepoints: list[tuple[str, Any]] = []
        self.n = 0

    def name(self, what: str) -> str:
        self.n += 1
        return f"{self.tag}-{what}{self.n}"

    def unit(self, mode: str) -> Any:
        outbox = Outbox(
            "delete" if mode == "at_publish" else mode,
            at_commit=mode != "at_publish",
            message_prefix=PREFIX,
        )
        if isinstance(self.session, AsyncSession):
            return AsyncUnitOfWork(self.session, outbox)
        return UnitOfWork(self.session, outbox)

    async def step(self, move: tuple[Any, ...]) -> None:
        kind, top = move[0], self.frames[-1]
        if kind == "row":
            row = self.name("r")
            await done(self.session.execute(text("INSERT INTO business VALUES (:id)"), {"id": row}))
            top.rows.append(row)
        elif kind == "slow":  # an event written at commit, slowly
            event = f"{self.name('e')}-slow"
            await done(
                self.unit("delete").publish(
                    aggregate_type="order", aggregate_id=event, event_type="Placed", payload={}
                )
            )
            top.events.append(event)
        elif kind == "publish":
            mode, how_many = move[1], move[2]
            suffix = "-m" if mode == "message" else ""
            ids = [self.name("e") + suffix for _ in range(max(how_many, 1))]
            unit = self.unit(mode)
            if how_many == 0:  # publish one
                await done(
                    unit.publish(
                        aggregate_type="order",
                        aggregate_id=ids[0],
                        event_type="Placed",
                        payload={"id": ids[0]},
                    )
                )
            else:
                events = [NewEvent("order", i, "Placed", {"id": i}) for i in ids]
                await done(unit.publish_many(events))
            top.events += ids
        elif kind == "schedule":
            key, event = f"{self.tag}-k{move[1]}", self.name("s")
            await done(
                self.unit("delete").schedule(
                    aggregate_type="order",
                    aggregate_id=event,
                    event_type="Due",
                    payload={},
                    delay=3600,
                    key=key,
                )
            )
            top.schedules.append((key, event))
        elif kind == "cancel":
            key = f"{self.tag}-k{move[1]}"
            await done(self.unit("delete").cancel_scheduled(key))
            top.schedules.append((key, None))
        elif kind == "savepoint":
            if move[1] == "orm":
                handle: Any = await done(self.session.begin_nested())
            else:
                handle = f"s{len(self.savepoints)}"
                await done(self.session.execute(text(f"SAVEPOINT {handle}")))
            self.savepoints.append((move[1], handle))
            self.frames.append(Frame())
        elif kind in ("release", "rollback_to") and self.savepoints:
            how, handle = self.savepoints.pop()
            inner = self.frames.pop()
            if kind == "release":
                if how == "orm":
                    await done(handle.commit())
                else:
                    await done(self.session.execute(text(f"RELEASE SAVEPOINT {handle}")))
                self.frames[-1].merge(inner)
            elif how == "orm":
                await done(handle.rollback())
            else:
                await done(self.session.execute(text(f"ROLLBACK TO SAVEPOINT {handle}")))
                await done(self.session.execute(text(f"RELEASE SAVEPOINT {handle}")))

    def written(self) -> Frame:
        while len(self.frames) > 1:  # open savepoints are committed with the transaction
            inner = self.frames.pop()
            self.frames[-1].merge(inner)
        return self.frames[0]

    async def end(self, how: tuple[Any, ...]) -> bool:
        """End the transaction as ``how`` says; whether it committed."""
        if how[0] in ("commit", "cancel"):
            await done(self.session.commit())
            return True
        if how[0] == "rollback":
            await done(self.session.rollback())
        elif how[0] == "kill":
            result = await done(self.session.execute(text("SELECT pg_backend_pid()")))
            with self.observer.connect() as conn:
                conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": result.scalar_one()})
            with pytest.raises(Exception) as raised:
                await done(self.session.commit())
            assert is_transient(raised.value), raised.value
        return False  # "close": the session closes without either


async def run_one(session: Any, tag: str, tx: Any, observer: Engine) -> Outcome:
    steps, how = tx
    transaction = Transaction(session, tag, observer)
    try:
        await done(session.begin())
        for move in steps:
            await transaction.step(move)
        ok = await transaction.end(how)
    finally:
        await done(session.close())
    return Outcome(transaction.written(), ok)


async def run_cancelled(session: AsyncSession, tag: str, tx: Any, observer: Engine) -> Outcome:
    """The transaction, then its commit, run as a task cancelled after ``ticks`` turns of the
    event loop and ``ms`` milliseconds: before its commit (nothing committed), in it (all or
    nothing), or after it. Its first step writes a row, so the WAL tells which; its last
    publishes an event that takes 20 ms to write at commit, where the cancellation often
    lands."""
    steps, (_, ticks, ms) = tx
    transaction = Transaction(session, tag, observer)

    async def whole() -> None:
        try:
            await session.begin()
            for move in [("row",), *steps, ("slow",)]:
                await transaction.step(move)
            await session.commit()
        finally:
            with contextlib.suppress(Exception):
                await session.close()

    task = asyncio.create_task(whole())
    for _ in range(ticks):
        await asyncio.sleep(0)
    await asyncio.sleep(ms / 1000)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return Outcome(transaction.written(), None)


async def run_async(url: str, txs: list[Any], tag: str, observer: Engine) -> list[Outcome]:
    engine = attach_at_commit(
        async_engine_for(url, "service", pool_size=1, max_overflow=0, pool_timeout=5)
    )
    outcomes = []
    try:
        for t, tx in enumerate(txs):
            run = run_cancelled if tx[1][0] == "cancel" else run_one
            outcomes.append(await run(AsyncSession(engine), f"{tag}t{t}", tx, observer))
    finally:
        await engine.dispose()
    return outcomes


def run_sync(url: str, txs: list[Any], tag: str, observer: Engine) -> list[Outcome]:
    engine = attach_at_commit(
        engine_for(url, "service", pool_size=1, max_overflow=0, pool_timeout=5)
    )
    try:
        return [
            asyncio.run(run_one(Session(engine), f"{tag}t{t}", tx, observer))
            for t, tx in enumerate(txs)
        ]
    finally:
        engine.dispose()


def shape(frame: Frame) -> tuple[set[str], list[str], list[str]]:
    """What must match: the rows; the outbox table's events in order, and the messages in
    order. Postgres's logical decoding was seen to put a transactional message emitted in a
    subtransaction after top-level changes written later (a savepoint's message, then a
    delete-mode row written at commit): between the two kinds the order is not compared."""
    messages = [e for e in frame.events if e.endswith("-m")]
    return set(frame.rows), [e for e in frame.events if not e.endswith("-m")], messages


def check(outcomes: list[Outcome], wal: list[Frame]) -> list[bool]:
    """Match the model's transactions to the WAL's, in order; which ones committed."""
    at, took = 0, []
    for n, outcome in enumerate(outcomes):
        expected = outcome.frame
        if not (expected.rows or expected.events):
            took.append(outcome.committed is True)
            continue
        here = wal[at] if at < len(wal) else None
        matches = here is not None and shape(here) == shape(expected)
        if outcome.committed or (outcome.committed is None and matches):
            assert matches, (n, "committed as", here, "expected", expected)
            at += 1
            took.append(True)
        else:
            if here is not None:
                mine = set(expected.rows) | set(expected.events)
                assert not mine & (set(here.rows) | set(here.events)), (n, "leaked into", here)
            took.append(False)
    assert wal[at:] == [], ("transactions nobody committed", wal[at:])
    return took


@settings(
    max_examples=int(os.environ.get("OUTBOXKIT_MODEL_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(txs=st.lists(transaction, min_size=1, max_size=4), form=st.sampled_from(("sync", "async")))
def test_an_event_commits_if_and_only_if_its_transaction_does(
    database: tuple[str, str], txs: list[Any], form: str
) -> None:
    url, slot = database
    note(f"{form}: {txs}")
    if form == "sync":  # a synchronous commit is not cancelled: a connection killed instead
        txs = [(steps, ("kill",) if how[0] == "cancel" else how) for steps, how in txs]
    observer = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with observer.connect() as conn:
            conn.execute(text("DELETE FROM outbox_scheduled"))
        committed(observer, slot)  # what went before this example
        tag = uuid.uuid4().hex[:6]
        if form == "async":
            outcomes = asyncio.run(run_async(url, txs, tag, observer))
        else:
            outcomes = run_sync(url, txs, tag, observer)
        took = check(outcomes, committed(observer, slot))
        expected: dict[str, str] = {}
        for outcome, kept in zip(outcomes, took, strict=True):
            for key, event in outcome.frame.schedules if kept else ():
                if event is None:
                    expected.pop(key, None)
                else:
                    expected[key] = event
        assert pending_schedules(observer) == expected
    finally:
        observer.dispose()
