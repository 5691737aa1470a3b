"""Where the time goes, under cProfile, own time grouped by the code it was spent in:

- the inbox sink: the framework's Inbox applying synthetic records (the inbox scenario's
  workload). The sink is the pipeline's slowest stage (the pipeline scenario: ``addBatch`` is
  most of a micro-batch), so this says what bounds the pipeline on each core: Python CPU
  (decoding, building statements) or waiting for Postgres (round trips, commits);
- the outbox write: one writer running the outbox scenario's delete-mode service transaction,
  to say what the outbox row costs a service."""

from __future__ import annotations

import cProfile
import pstats
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from outboxkit_workshop.bench.report import describe, machine, markdown_table

# Ordered: the first pattern found in a function's file (or name) decides its group.
# psycopg waits for the server inside compiled code that cProfile cannot see: that time lands in
# the psycopg functions that call it, so the wall-minus-CPU split below tells the waiting apart.
GROUPS = (
    ("psycopg (driver; includes waiting for Postgres)", ("psycopg",)),
    ("SQLAlchemy (statements, ORM session)", ("sqlalchemy",)),
    ("decoding records (JSON, UUID, envelope)", ("json", "uuid", "kernel/", "outbox/", "datetime")),
    ("inbox logic (decide, window, watermark)", ("inbox/",)),
    ("handler (the business INSERT's Python)", ("bench/inbox",)),
)


def group_of(filename: str, function: str) -> str:
    where = f"{filename}:{function}"
    for name, patterns in GROUPS:
        if any(p in where for p in patterns):
            return name
    return "other Python"


def _profiled(work: Callable[[], None]) -> dict[str, float]:
    """Seconds of own time per group while ``work`` runs, plus its wall time."""
    profiler = cProfile.Profile()
    began, cpu = time.perf_counter(), time.process_time()
    profiler.enable()
    work()
    profiler.disable()
    wall, cpu = time.perf_counter() - began, time.process_time() - cpu
    totals: dict[str, float] = {}
    # {(file, line, function): (primitive calls, calls, own time, cumulative time, callers)}
    stats: Any = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    for (filename, _line, function), (_cc, _nc, own, _cum, _callers) in stats.items():
        group = group_of(filename, function)
        totals[group] = totals.get(group, 0.0) + own
    totals["wall (profiled)"] = wall
    totals["cpu (profiled)"] = cpu
    return totals


def profile_sink(url: str, events: int = 20_000, batch: int = 1000) -> dict[str, float]:
    """The Inbox applying ``events`` records in partition batches of ``batch`` through the
    batch handler (COPY of the slice's business rows), with the at-least-once window."""
    from outboxkit_workshop.bench.inbox import (
        batches,
        full_inbox,
        prepare_database,
        record_effects,
        reset,
    )

    engine = prepare_database(url)
    reset(engine)
    work = list(batches(events, batch))

    def apply() -> None:
        for records in work:
            full_inbox(engine, records, record_effects)

    totals = _profiled(apply)
    reset(engine)
    engine.dispose()
    return totals


def profile_writes(url: str, transactions: int = 2000) -> dict[str, float]:
    """One writer running ``transactions`` delete-mode outbox service transactions."""
    from sqlalchemy import create_engine

    from migrations.runner import upgrade
    from outbox import at_commit
    from outbox.publish import Outbox
    from outboxkit_workshop.bench import writes

    upgrade(url)
    engine = at_commit.attach(create_engine(url, pool_size=1))
    writes.metadata.create_all(engine)
    publish = writes.publisher(Outbox("delete"))

    def write() -> None:
        for n in range(transactions):
            writes.transaction(engine, publish, n)

    totals = _profiled(write)
    writes.reset(engine)
    engine.dispose()
    return totals


def _table(totals: dict[str, float]) -> str:

    groups = {k: v for k, v in totals.items() if not k.endswith("(profiled)")}
    profiled = sum(groups.values())
    rows = [
        [group, f"{seconds:.2f}", f"{100 * seconds / profiled:.0f}%"]
        for group, seconds in sorted(groups.items(), key=lambda kv: -kv[1])
    ]
    wall, cpu = totals["wall (profiled)"], totals["cpu (profiled)"]
    return (
        f"{wall:.1f} s wall = {cpu:.1f} s CPU in this Python process (profiler included) + "
        f"{wall - cpu:.1f} s waiting ({100 * (wall - cpu) / wall:.0f}%: Postgres round trips "
        "and commits).\n\n" + markdown_table(["spent in (own time)", "seconds", "share"], rows)
    )


def run(
    url: str, out: Path, *, events: int = 20_000, transactions: int = 2000
) -> tuple[dict[str, Any], str]:
    sink = profile_sink(url, events)
    write = profile_writes(url, transactions)
    wall_sink, wall_write = sink["wall (profiled)"], write["wall (profiled)"]
    md = (
        "### Where the time goes (cProfile, own time per group)\n\n"
        + describe(machine(url))
        + f"\nThe inbox sink: the framework's Inbox applying {events:,} records (4 partitions, "
        f"1,000 per partition transaction; a batch handler COPYs one row per event; the "
        f"event-id window of an at-least-once source), {wall_sink:.1f} s wall "
        f"({events / wall_sink:,.0f} rows/s under the profiler).\n\n"
        + _table(sink)
        + f"\nThe outbox write: {transactions:,} delete-mode service transactions by one writer "
        f"(order row + event), {wall_write:.1f} s wall ({transactions / wall_write:,.0f} tx/s "
        "under the profiler).\n\n" + _table(write)
    )
    data = {"scenario": "profile", "events": events, "transactions": transactions}
    data |= {"inbox_sink_seconds": sink, "outbox_write_seconds": write}
    return data, md
