"""Outbox write overhead: the same service transaction with and without the outbox.

The transaction is what a service endpoint does: insert one business row (an order) and, with the
outbox, publish one event about it in the same transaction (validated envelope, JSONB payload).
Variants, measured interleaved at 1, 4 and 16 concurrent writers (threads, one connection each):

- no outbox: the business row alone (the baseline);
- delete mode, before: the write path as it was (SQLAlchemy-compiled INSERT, then DELETE);
- delete mode, pipelined: the lean path before its one-statement write (INSERT and DELETE in
  psycopg's pipeline, one round trip);
- delete mode, at publish: the lean path before the write at commit, one statement at publish,
  a function that inserts and deletes the row (migration 0008);
- outbox, delete mode (the default): that function's call sent with the transaction's COMMIT,
  in its round trip (`outbox.at_commit`);
- outbox, retain mode: the outbox row stays (cleanup runs elsewhere);
- outbox, message mode: no row, a transactional logical decoding message.

And the same service transaction as an ``async`` service writes it, side by side in the same run:
an `AsyncSession` on psycopg's async driver, the event published through `outbox.AsyncUnitOfWork`
(the synchronous unit run in SQLAlchemy's greenlet), the writers being tasks of one event loop
(as an async service's requests are), each on a connection of its own:

- async, no outbox: the business row alone (the async variants' baseline);
- async, outbox, delete mode: the write at commit, on the async driver (`attach_at_commit`);
- async, delete mode, at publish: the one statement at publish (as asyncpg writes it);
- async, outbox, retain mode and async, outbox, message mode.

Besides transactions/s, each measurement records the benchmark process's CPU time (the client:
SQLAlchemy, psycopg, validation) and the WAL the server wrote; per event, each is the variant's
figure per transaction less its baseline's (an async variant's: the async baseline's). Commits
are durable (fsync on, synchronous_commit on).
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import (
    JSON,
    Column,
    DateTime,
    Engine,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    cast,
    create_engine,
    delete,
    func,
    insert,
    literal,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from outbox import AsyncUnitOfWork, at_commit, statements
from outbox.publish import Outbox
from outbox.table import outbox_table
from outboxkit.kernel.envelope import make_envelope
from outboxkit.kernel.wire.jsonb import render, utf8_size
from outboxkit_workshop.bench.report import (
    Progress,
    bar_plot,
    describe,
    machine,
    markdown_table,
    ratio,
    spread,
    spread_cells,
)

metadata = MetaData()
orders = Table(
    "bench_order",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("customer", String(64), nullable=False),
    Column("items", JSON, nullable=False),
    Column("amount", Integer, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)

WRITERS = (1, 4, 16)
BASELINE, BEFORE = "no outbox", "delete mode, before"
PIPELINED = "delete mode, pipelined"
AT_PUBLISH = "delete mode, at publish"
SYNC_VARIANTS = (
    BASELINE,
    BEFORE,
    PIPELINED,
    AT_PUBLISH,
    "outbox, delete mode",
    "outbox, retain mode",
    "outbox, message mode",
)
ASYNC = "async, "  # the prefix of the async variants' names
ASYNC_BASELINE = ASYNC + BASELINE
ASYNC_VARIANTS = (
    ASYNC_BASELINE,
    ASYNC + "outbox, delete mode",
    ASYNC + AT_PUBLISH,
    ASYNC + "outbox, retain mode",
    ASYNC + "outbox, message mode",
)
VARIANTS = SYNC_VARIANTS + ASYNC_VARIANTS
MODES = ("delete", "retain", "message")
ITEMS = [{"sku": "widget", "qty": 2}, {"sku": "gadget", "qty": 1}]


def baseline_of(variant: str) -> str:
    """The variant ``variant`` is compared with: the same transaction without the outbox, on
    the same driver."""
    return ASYNC_BASELINE if variant.startswith(ASYNC) else BASELINE


def transaction(engine: Engine, write: Callable[[Session, str, int], None] | None, n: int) -> None:
    """One service transaction: the order row, and its event when ``write`` is given."""
    order_id = str(uuid.uuid4())
    with Session(engine) as session, session.begin():
        session.execute(
            insert(orders).values(id=order_id, customer=f"cust-{n % 97}", items=ITEMS, amount=n)
        )
        if write is not None:
            write(session, order_id, n)


def payload(order_id: str, n: int) -> dict[str, Any]:
    return {"id": order_id, "customer": f"cust-{n % 97}", "items": ITEMS, "n": n}


def publisher(outbox: Outbox) -> Callable[[Session, str, int], None]:
    def write(session: Session, order_id: str, n: int) -> None:
        outbox.publish(
            session,
            aggregate_type="order",
            aggregate_id=order_id,
            event_type="OrderPlaced",
            payload=payload(order_id, n),
        )

    return write


def publish_before(session: Session, order_id: str, n: int) -> None:
    """Delete mode's write path before the lean one: the same validation, then an INSERT with
    its values compiled by SQLAlchemy and a DELETE, two round trips."""
    envelope, payload_json = make_envelope(
        aggregate_type="order",
        aggregate_id=order_id,
        event_type="OrderPlaced",
        payload=payload(order_id, n),
    )
    row = {
        "id": envelope.event_id,
        "aggregatetype": envelope.aggregate_type,
        "aggregateid": envelope.aggregate_id,
        "type": envelope.event_type,
        "payload": cast(literal(payload_json, Text), JSONB),
        "traceparent": envelope.traceparent,
        "headers": None,
        "schema_version": envelope.schema_version,
        "created_at": envelope.created_at,
    }
    session.execute(insert(outbox_table).values([row]))
    session.execute(delete(outbox_table).where(outbox_table.c.id.in_([envelope.event_id])))


def publish_pipelined(session: Session, order_id: str, n: int) -> None:
    """Delete mode's lean path before its one-statement write (migration 0008): the INSERT and
    the DELETE as two statements in psycopg's pipeline, one round trip."""
    envelope, payload_json = make_envelope(
        aggregate_type="order",
        aggregate_id=order_id,
        event_type="OrderPlaced",
        payload=payload(order_id, n),
    )
    row = statements.Row.of(envelope, payload_json)
    pair = [(statements.INSERT_ONE, row), (statements.DELETE_ONE, (row.id,))]
    statements.execute(session, pair, one_event=True)  # the path as it was, to measure against


WRITES: dict[str, Callable[[Session, str, int], None] | None] = {
    BASELINE: None,
    BEFORE: publish_before,
    PIPELINED: publish_pipelined,
    AT_PUBLISH: publisher(Outbox("delete", at_commit=False)),
    "outbox, delete mode": publisher(Outbox("delete")),
    "outbox, retain mode": publisher(Outbox("retain")),
    "outbox, message mode": publisher(Outbox("message")),
}

AsyncWrite = Callable[[AsyncSession, str, int], Awaitable[None]]


async def async_transaction(engine: AsyncEngine, write: AsyncWrite | None, n: int) -> None:
    """`transaction` as an async service runs it: an AsyncSession, awaited."""
    order_id = str(uuid.uuid4())
    async with AsyncSession(engine) as session, session.begin():
        await session.execute(
            insert(orders).values(id=order_id, customer=f"cust-{n % 97}", items=ITEMS, amount=n)
        )
        if write is not None:
            await write(session, order_id, n)


def async_publisher(outbox: Outbox) -> AsyncWrite:
    async def write(session: AsyncSession, order_id: str, n: int) -> None:
        await AsyncUnitOfWork(session, outbox).publish(
            aggregate_type="order",
            aggregate_id=order_id,
            event_type="OrderPlaced",
            payload=payload(order_id, n),
        )

    return write


ASYNC_WRITES: dict[str, AsyncWrite | None] = {
    ASYNC_BASELINE: None,
    ASYNC + "outbox, delete mode": async_publisher(Outbox("delete")),
    ASYNC + AT_PUBLISH: async_publisher(Outbox("delete", at_commit=False)),
    ASYNC + "outbox, retain mode": async_publisher(Outbox("retain")),
    ASYNC + "outbox, message mode": async_publisher(Outbox("message")),
}


@dataclass(frozen=True)
class Measured:
    """One measurement: transactions/s, client CPU and WAL bytes per transaction."""

    rate: float
    cpu_us: float
    wal_bytes: float


def measure(
    engine: Engine, variant: str, writers: int, transactions: int, advance: Callable[[int], None]
) -> Measured:
    """``writers`` threads sharing ``transactions`` transactions."""
    write = WRITES[variant]
    per_writer = transactions // writers
    start = threading.Barrier(writers + 1)
    errors: list[BaseException] = []

    def work(w: int) -> None:
        start.wait()
        try:
            for i in range(per_writer):
                transaction(engine, write, w * per_writer + i)
                if i % 50 == 49:
                    advance(50)
        except BaseException as exc:  # reported by the caller
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(writers)]
    for thread in threads:
        thread.start()
    wal_before = wal_position(engine)
    cpu_before = time.process_time()
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    cpu = time.process_time() - cpu_before
    wal = wal_bytes_since(engine, wal_before)
    if errors:
        raise errors[0]
    done = per_writer * writers
    return Measured(done / elapsed, cpu / done * 1e6, wal / done)


def measure_async(
    loop: asyncio.AbstractEventLoop,
    engine: AsyncEngine,
    wal_engine: Engine,
    variant: str,
    writers: int,
    transactions: int,
    advance: Callable[[int], None],
) -> Measured:
    """``writers`` tasks on ``loop`` sharing ``transactions`` transactions."""
    write = ASYNC_WRITES[variant]
    per_writer = transactions // writers

    async def work(w: int) -> None:
        for i in range(per_writer):
            await async_transaction(engine, write, w * per_writer + i)
            if i % 50 == 49:
                advance(50)

    async def every_writer() -> float:
        began = time.perf_counter()
        await asyncio.gather(*(work(w) for w in range(writers)))
        return time.perf_counter() - began

    wal_before = wal_position(wal_engine)
    cpu_before = time.process_time()
    elapsed = loop.run_until_complete(every_writer())
    cpu = time.process_time() - cpu_before
    wal = wal_bytes_since(wal_engine, wal_before)
    done = per_writer * writers
    return Measured(done / elapsed, cpu / done * 1e6, wal / done)


def wal_position(engine: Engine) -> str:
    with engine.connect() as conn:
        return str(conn.scalar(text("SELECT pg_current_wal_insert_lsn()")))


def wal_bytes_since(engine: Engine, lsn: str) -> float:
    with engine.connect() as conn:
        diff = conn.scalar(
            text("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), CAST(:lsn AS pg_lsn))"),
            {"lsn": lsn},
        )
    return float(diff or 0)


def reset(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(text("TRUNCATE bench_order, outbox"))


def summarise(
    runs: dict[str, list[Measured]], params: dict[str, Any], found: dict[str, Any]
) -> tuple[dict[str, Any], str]:
    rates = {k: [m.rate for m in v] for k, v in runs.items()}
    rows = []
    for writers in params["writers"]:
        for variant in VARIANTS:
            base = runs[f"{writers} / {baseline_of(variant)}"]
            base_rate = spread([m.rate for m in base])["median"]
            base_cpu = statistics.median(m.cpu_us for m in base)
            base_wal = statistics.median(m.wal_bytes for m in base)
            measured = runs[f"{writers} / {variant}"]
            samples = [m.rate for m in measured]
            extra = variant != baseline_of(variant)
            cpu = statistics.median(m.cpu_us for m in measured) - base_cpu
            wal = statistics.median(m.wal_bytes for m in measured) - base_wal
            rows.append(
                [
                    writers,
                    variant,
                    *spread_cells(samples),
                    ratio(spread(samples)["median"] / base_rate),
                    f"{cpu:,.0f}" if extra else "",
                    f"{wal:,.0f} ({wal / params['payload_bytes']:.2f}x)" if extra else "",
                ]
            )
    md = (
        "### Outbox write overhead: service transactions/s\n\n"
        f"{params['transactions']:,} transactions per measurement (one order row, plus one "
        f"outbox event in the outbox variants; payload {params['payload_bytes']} bytes as jsonb), "
        f"{params['reps']} repetitions interleaved; durable commits; ratio = median / median "
        "without outbox at the same writer count, on the same driver: the synchronous variants "
        "on a Session (threads), the async ones on an AsyncSession "
        f"({params['async_driver']}'s async driver, tasks of one event loop, the event through "
        "AsyncUnitOfWork). Per event: the variant's client CPU (this process: SQLAlchemy, "
        "psycopg, validation) and WAL bytes per transaction, medians, less its baseline's; WAL "
        "also as a multiple of the payload.\n"
        + describe(found)
        + "\n"
        + markdown_table(
            [
                "writers",
                "variant",
                "min tx/s",
                "median tx/s",
                "max tx/s",
                "ratio",
                "client CPU us/event",
                "WAL bytes/event",
            ],
            rows,
        )
    )
    data = {
        "scenario": "outbox",
        "params": params,
        "machine": found,
        "transactions_per_second": {k: spread(v) | {"samples": v} for k, v in rates.items()},
        "client_cpu_us_per_transaction": {k: [m.cpu_us for m in v] for k, v in runs.items()},
        "wal_bytes_per_transaction": {k: [m.wal_bytes for m in v] for k, v in runs.items()},
    }
    return data, md


# The plot's bars: each driver's transaction without the outbox and in each mode (the table has
# every variant).
PLOTTED = (
    BASELINE,
    *(f"outbox, {m} mode" for m in MODES),
    ASYNC_BASELINE,
    *(f"{ASYNC}outbox, {m} mode" for m in MODES),
)


def run(
    url: str,
    out: Path,
    *,
    transactions: int = 2000,
    reps: int = 3,
    writers: Sequence[int] = WRITERS,
) -> tuple[dict[str, Any], str]:
    from migrations.runner import upgrade

    upgrade(url)
    engine = at_commit.attach(create_engine(url, pool_size=max(writers), max_overflow=0))
    # The same URL on the async driver (postgresql+psycopg: psycopg's), pooled alike; one event
    # loop for every async measurement, as its connections belong to the loop they opened on.
    async_engine = at_commit.attach(
        create_async_engine(url, pool_size=max(writers), max_overflow=0)
    )
    loop = asyncio.new_event_loop()
    metadata.create_all(engine)
    runs: dict[str, list[Measured]] = {f"{w} / {v}": [] for w in writers for v in VARIANTS}
    per_rep = sum(transactions // w * w for w in writers) * len(VARIANTS)
    try:
        with Progress("outbox writes", per_rep * reps) as progress:
            for rep in range(reps):
                for w in writers:
                    for variant in VARIANTS:
                        progress.update(f"outbox writes: {w} writers, {variant} ({rep + 1}/{reps})")
                        reset(engine)
                        runs[f"{w} / {variant}"].append(
                            measure(engine, variant, w, transactions, progress.advance)
                            if variant in WRITES
                            else measure_async(
                                loop,
                                async_engine,
                                engine,
                                variant,
                                w,
                                transactions,
                                progress.advance,
                            )
                        )
        reset(engine)
    finally:
        loop.run_until_complete(async_engine.dispose())
        loop.close()
        engine.dispose()
    params = {
        "transactions": transactions,
        "reps": reps,
        "writers": list(writers),
        "payload_bytes": utf8_size(render(payload(str(uuid.uuid4()), 1000))),
        "async_driver": async_engine.dialect.driver,  # psycopg (its async connection)
    }
    data, md = summarise(runs, params, machine(url))
    rates = {k: [m.rate for m in v] for k, v in runs.items() if k.split(" / ", 1)[1] in PLOTTED}
    data["plots"] = [
        str(
            bar_plot(
                out / "outbox.png",
                "Service transactions/s with and without the outbox, sync and async, by writers",
                rates,
                ylabel="transactions/s",
                groups=[str(w) for w in writers],
            )
        )
    ]
    return data, md + "\n![outbox write overhead](outbox.png)\n"
