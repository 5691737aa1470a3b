"""Inbox sink benchmark: rows/s and dedup-state size of four ways to apply Kafka records, each
with the one-event handler API and with a batch handler.

- unguarded: the handler runs for every record, nothing is deduplicated (the ceiling);
- watermark: the (partition, max offset) row alone, locked per batch (replays only);
- inbox: this framework's Inbox (watermark + bounded window of recent event ids + parking);
- message-id: the classic inbox, one row per processed message id, claimed per batch;
- source positions: the Inbox on records that carry their source position (the connector's
  headers), judged by it, with no window (its state: one row per partition) or with one.

Every variant applies the same synthetic records (decoded into envelopes; the handler inserts one
business row per event: one INSERT each, or one executemany per slice) in one transaction per
partition batch, against the same Postgres.
"""

from __future__ import annotations

import functools
import gc
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Engine,
    Identity,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    func,
    insert,
    text,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import Session

from inbox import EXACTLY_ONCE_WINDOW, BatchHandler, Handlers, Inbox, as_batch
from inbox.recorder import Recorder
from outbox.unit import UnitOfWork
from outboxkit.kernel.envelope import Envelope
from outboxkit.kernel.wire import SOURCE, SOURCE_POSITION
from outboxkit.kernel.wire.record import KafkaRecord, decode, encode
from outboxkit_workshop.bench.report import (
    FROZEN_INPUT,
    Progress,
    bar_plot,
    describe,
    machine,
    markdown_table,
    ratio_rows,
    spread,
)

AGGREGATE_TYPE = "bench"
PARTITIONS = 4

bench_metadata = MetaData()
effects = Table(
    "bench_effect",
    bench_metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("event_id", String(64), nullable=False),
    Column("n", Integer, nullable=False),
)
processed = Table(
    "bench_processed_message",
    bench_metadata,
    Column("consumer", String(255), nullable=False),
    Column("message_id", String(64), nullable=False),
    Column("processed_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("consumer", "message_id"),
)


def make_records(
    partition: int, start: int, count: int, *, positions: bool = False
) -> list[KafkaRecord]:
    """``count`` outbox-style records of one partition from offset ``start``, carrying their
    source position when ``positions`` (as the connector writes them)."""
    records = [
        encode(
            Envelope(
                aggregate_type=AGGREGATE_TYPE,
                aggregate_id=f"k{offset % 64}",
                event_type="Tick",
                payload={"n": offset, "note": "benchmark"},
            ),
            partition=partition,
            offset=offset,
            timestamp_ms=1_700_000_000_000 + offset,
        )
        for offset in range(start, start + count)
    ]
    if not positions:
        return records
    return [
        r._replace(
            headers=[
                *r.headers,
                (SOURCE, b"bench"),
                (SOURCE_POSITION, f'["{r.offset}","{r.offset}"]'.encode()),
            ]
        )
        for r in records
    ]


def record_effect(envelope: Envelope, uow: UnitOfWork) -> None:
    """The business write every variant performs once per applied record (one-event API)."""
    uow.session.execute(
        insert(effects).values(event_id=str(envelope.event_id), n=envelope.payload["n"])
    )


def _record_effects(events: Sequence[Envelope], uow: UnitOfWork) -> None:
    # psycopg's COPY on the connection of the inbox's transaction: one round trip per slice.
    driver = uow.session.connection().connection.driver_connection
    assert driver is not None
    with driver.cursor().copy("COPY bench_effect (event_id, n) FROM STDIN") as copy:
        for e in events:
            copy.write_row((str(e.event_id), e.payload["n"]))


# The same business write for a whole slice in one COPY (the batch-handler API).
record_effects = BatchHandler(_record_effects)


def no_effect(envelope: Envelope, uow: UnitOfWork) -> None:
    """For state-size runs: only the dedup machinery works."""


def _envelope(record: KafkaRecord) -> Envelope:
    return decode(record)


def unguarded(engine: Engine, records: Sequence[KafkaRecord], handler: Handlers) -> None:
    with Session(engine) as session, session.begin():
        as_batch(handler).apply([_envelope(r) for r in records], UnitOfWork(session))


def watermark_only(engine: Engine, records: Sequence[KafkaRecord], handler: Handlers) -> None:
    recorder = Recorder("bench-watermark")
    topic, partition = records[0].topic, records[0].partition
    with Session(engine) as session, session.begin():
        mark = recorder.lock(session, topic, partition)
        fresh = [_envelope(r) for r in records if r.offset > mark]
        as_batch(handler).apply(fresh, UnitOfWork(session))
        recorder.advance(session, topic, partition, max(mark, records[-1].offset))


def full_inbox(engine: Engine, records: Sequence[KafkaRecord], handler: Handlers) -> None:
    Inbox(engine, "bench-inbox", handler).apply_partition(records)


def windowed_inbox(
    engine: Engine, records: Sequence[KafkaRecord], handler: Handlers, *, window: int
) -> None:
    # The Inbox with an explicit window: EXACTLY_ONCE_WINDOW for an exactly-once source (the
    # re-sends of Debezium's resume), 0 for a producer that never writes an event twice.
    Inbox(engine, "bench-inbox", handler, window=window).apply_partition(records)


def message_id_inbox(engine: Engine, records: Sequence[KafkaRecord], handler: Handlers) -> None:
    # The classic inbox, batched: claim every id of the batch in one statement, apply the new.
    envelopes = [_envelope(r) for r in records]
    with Session(engine) as session, session.begin():
        claimed = set(
            session.execute(
                pg_insert(processed)
                .values(
                    [
                        {"consumer": "bench-message-id", "message_id": str(e.event_id)}
                        for e in envelopes
                    ]
                )
                .on_conflict_do_nothing()
                .returning(processed.c.message_id)
            ).scalars()
        )
        fresh = [e for e in envelopes if str(e.event_id) in claimed]
        as_batch(handler).apply(fresh, UnitOfWork(session))


Sink = Callable[[Engine, Sequence[KafkaRecord], Handlers], None]
# Each variant: how records are deduplicated, and which handler API writes the effect.
VARIANTS: dict[str, tuple[Sink, Handlers]] = {
    "unguarded, per-event handler": (unguarded, record_effect),
    "inbox, per-event handler": (full_inbox, record_effect),
    "message-id, per-event handler": (message_id_inbox, record_effect),
    "unguarded, batch handler": (unguarded, record_effects),
    "watermark, batch handler": (watermark_only, record_effects),
    "inbox, batch handler": (full_inbox, record_effects),
    "inbox, exactly-once source (10,000 window), batch handler": (
        functools.partial(windowed_inbox, window=EXACTLY_ONCE_WINDOW),
        record_effects,
    ),
    "inbox, watermark only (window 0), batch handler": (
        functools.partial(windowed_inbox, window=0),
        record_effects,
    ),
    "message-id, batch handler": (message_id_inbox, record_effects),
    "inbox, source positions (window 0), batch handler": (
        functools.partial(windowed_inbox, window=0),
        record_effects,
    ),
    "inbox, source positions and exactly-once window, batch handler": (
        functools.partial(windowed_inbox, window=EXACTLY_ONCE_WINDOW),
        record_effects,
    ),
}
# Variants whose records carry their source position.
POSITIONED = frozenset(
    {
        "inbox, source positions (window 0), batch handler",
        "inbox, source positions and exactly-once window, batch handler",
        "source positions",
    }
)
BASELINE = "unguarded, batch handler"
COMPARED = (
    ("inbox, batch handler", "inbox, per-event handler"),
    ("inbox, batch handler", "message-id, batch handler"),
    (
        "inbox, source positions and exactly-once window, batch handler",
        "inbox, exactly-once source (10,000 window), batch handler",
    ),
    (
        "inbox, source positions (window 0), batch handler",
        "inbox, watermark only (window 0), batch handler",
    ),
)
# Dedup state of each way to deduplicate, for the size report (grown without business writes).
STATE_TABLES = {
    "watermark": ("inbox_watermark",),
    "inbox": ("inbox_watermark", "inbox_recent"),
    "message-id": ("bench_processed_message",),
    "source positions": ("inbox_watermark", "inbox_recent"),
}
# Entries, not rows: the window keeps one row per applied slice holding its ids.
COUNT = {"inbox_recent": "SELECT coalesce(sum(cardinality(event_ids)), 0) FROM inbox_recent"}
GROWN: dict[str, Sink] = {
    "watermark": watermark_only,
    "inbox": full_inbox,
    "message-id": message_id_inbox,
    "source positions": functools.partial(windowed_inbox, window=0),
}


def reset(engine: Engine) -> None:
    """Empty the benchmark and inbox tables (the database is the benchmark's own)."""
    with engine.begin() as conn:
        conn.execute(
            text(
                "TRUNCATE bench_effect, bench_processed_message, inbox_watermark, inbox_recent,"
                " inbox_parked"
            )
        )


def batches(
    events: int, batch_size: int, *, positions: bool = False
) -> Iterator[list[KafkaRecord]]:
    """Partition batches round-robin over PARTITIONS, ``events`` records in all."""
    per_partition = events // PARTITIONS
    for start in range(0, per_partition, batch_size):
        count = min(batch_size, per_partition - start)
        for partition in range(PARTITIONS):
            yield make_records(partition, start, count, positions=positions)


@dataclass
class Throughput:
    variant: str
    seconds: float
    rows: int

    @property
    def rate(self) -> float:
        return self.rows / self.seconds


def run_variant(
    engine: Engine, variant: str, events: int, batch_size: int, advance: Callable[[int], None]
) -> Throughput:
    """Apply ``events`` records with one variant on empty tables; checks every row landed."""
    reset(engine)
    sink, handler = VARIANTS[variant]
    # Generated before the clock starts, and moved out of the cyclic collector's reach as a
    # consumer's Python worker moves its long-lived objects (`spark_consumers.sink`): a worker
    # holds one micro-batch's records, not 20,000, and full collections over these waiting
    # records slowed most the variants that allocate most (source positions: 0.52 of no
    # dedup's rate against 0.67 frozen, side by side).
    work = list(batches(events, batch_size, positions=variant in POSITIONED))
    gc.collect()
    gc.freeze()
    try:
        started = time.perf_counter()
        for batch in work:
            sink(engine, batch, handler)
            advance(len(batch))
        elapsed = time.perf_counter() - started
    finally:
        gc.unfreeze()
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT count(*) FROM bench_effect")).scalar_one()
    if rows != sum(len(b) for b in work):
        raise RuntimeError(f"{variant}: {rows} effect rows for {events} events")
    return Throughput(variant, elapsed, int(rows))


def state_size(engine: Engine, variant: str) -> dict[str, int]:
    """Rows and bytes (tables + indexes) of one variant's dedup state."""
    tables = STATE_TABLES[variant]
    with engine.connect() as conn:
        rows = sum(
            int(conn.execute(text(COUNT.get(t, f"SELECT count(*) FROM {t}"))).scalar_one())
            for t in tables
        )
        size = sum(
            int(conn.execute(text(f"SELECT pg_total_relation_size('{t}')")).scalar_one())
            for t in tables
        )
    return {"rows": rows, "bytes": size}


def grow(
    engine: Engine,
    variant: str,
    checkpoints: Sequence[int],
    batch_size: int,
    advance: Callable[[int], None],
) -> dict[int, dict[str, int]]:
    """Apply up to max(checkpoints) events without the business write; dedup-state size at
    each checkpoint."""
    reset(engine)
    sink, sizes, done = GROWN[variant], {}, 0
    wanted = sorted(checkpoints)
    for batch in batches(wanted[-1], batch_size, positions=variant in POSITIONED):
        sink(engine, batch, no_effect)
        done += len(batch)
        advance(len(batch))
        while wanted and done >= wanted[0]:
            sizes[wanted.pop(0)] = state_size(engine, variant)
    return sizes


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _median(samples: list[float]) -> float:
    return float(spread(samples)["median"])


def summarise(
    throughput: dict[str, list[float]],
    sizes: dict[str, dict[int, dict[str, int]]],
    params: dict[str, Any],
    found: dict[str, Any],
) -> tuple[dict[str, Any], str]:
    """JSON-ready figures and the markdown report."""
    rows = ratio_rows(throughput, BASELINE)
    md = [
        "### Inbox sink: rows/s into Postgres\n",
        f"{params['events']:,} events over {PARTITIONS} partitions, {params['batch']} records per "
        f"partition transaction, {params['reps']} repetitions; ratio = median / {BASELINE}. "
        f"{FROZEN_INPUT}\n",
        describe(found),
        markdown_table(["variant", "min rows/s", "median rows/s", "max rows/s", "ratio"], rows),
        *(
            f"- {a} / {b}: {_median(throughput[a]) / _median(throughput[b]):.2f}\n"
            for a, b in COMPARED
        ),
        "\n### Dedup state after N events (entries = rows, or ids in the window; all bytes)\n",
    ]
    checkpoints = sorted(next(iter(sizes.values())))
    size_rows = [
        [variant] + [f"{s[c]['rows']:,} rows, {human_bytes(s[c]['bytes'])}" for c in checkpoints]
        for variant, s in sizes.items()
    ]
    md.append(markdown_table(["variant"] + [f"after {c:,}" for c in checkpoints], size_rows))
    data = {
        "scenario": "inbox",
        "params": params,
        "machine": found,
        "rows_per_second": {v: spread(s) | {"samples": s} for v, s in throughput.items()},
        "state_size": sizes,
    }
    return data, "\n".join(md)


def prepare_database(url: str) -> Engine:
    """Framework migrations plus the benchmark's own tables on ``url``."""
    from sqlalchemy import create_engine

    from migrations.runner import upgrade

    upgrade(url)
    engine = create_engine(url, pool_size=2)
    bench_metadata.create_all(engine)
    return engine


def run(
    url: str,
    out: Path,
    *,
    events: int = 20_000,
    reps: int = 3,
    batch: int = 1000,
    checkpoints: Sequence[int] = (10_000, 100_000, 1_000_000),
) -> tuple[dict[str, Any], str]:
    """Measure every variant ``reps`` times (interleaved), then grow the dedup state."""
    engine = prepare_database(url)
    throughput: dict[str, list[float]] = {v: [] for v in VARIANTS}
    sizes: dict[str, dict[int, dict[str, int]]] = {}
    growing = tuple(GROWN)
    total = events * reps * len(VARIANTS) + max(checkpoints) * len(growing)
    with Progress("inbox sink", total) as progress:
        for rep in range(reps):
            for variant in VARIANTS:
                progress.update(f"inbox rows/s {variant} (rep {rep + 1}/{reps})")
                throughput[variant].append(
                    run_variant(engine, variant, events, batch, progress.advance).rate
                )
        for variant in growing:
            progress.update(f"inbox state size {variant}")
            sizes[variant] = grow(engine, variant, checkpoints, 5 * batch, progress.advance)
    reset(engine)
    engine.dispose()
    params = {
        "events": events,
        "reps": reps,
        "batch": batch,
        "checkpoints": list(checkpoints),
        "input_frozen": True,  # out of the cyclic collector's reach (`run_variant`)
    }
    data, markdown = summarise(throughput, sizes, params, machine(url))
    data["plots"] = [
        str(
            bar_plot(
                out / "inbox.png",
                f"Inbox sink rows/s into Postgres ({events:,} events, {reps} reps)",
                throughput,
                ylabel="rows/s",
            )
        )
    ]
    return data, markdown + "\n![inbox sink rows/s](inbox.png)\n"
