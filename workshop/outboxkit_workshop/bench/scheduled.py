"""Scheduled messages: how late a message reaches the outbox and Kafka after its time, and what
scheduling one costs next to publishing one.

Release lag: messages are scheduled ahead, then given their times in one statement (checked to
commit before the first is due) so that they come due evenly at each rate (100 and 1,000 per
second) for ``seconds``, on the benchmark's database with its own connector (`cdc.Bench`, delete
mode). One releaser with the default settings (`outbox.settings.ReleaseSettings`), started once
they are timed, releases them; a message's lag is from its time to the commit of the transaction
that released it, and to its record read from Kafka by a read_committed reader, both on this
machine's clock corrected by its offset to the database's.

Cost: a transaction that publishes one event, one that schedules one, and the same with ten
events (one `publish_many` / `schedule_many`), on a fresh database without a connector, the four
taking turns every ``BLOCK`` transactions; per event: the wall time / the events; the ratio:
schedule / publish at each size.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.orm import Session

from outbox import at_commit, scheduled
from outbox.publish import NewEvent, Outbox
from outbox.settings import ReleaseSettings
from outbox.statements import Row
from outbox.unit import UnitOfWork
from outboxkit.kernel.retry import wait_until
from outboxkit_workshop.bench.arrivals import Arrivals
from outboxkit_workshop.bench.cdc import Bench
from outboxkit_workshop.bench.report import Progress, bar_plot, machine, percentile, spread
from outboxkit_workshop.devstack.stack import Stack

RATES = (100.0, 1000.0)  # messages due per second
SECONDS = 25.0  # each rate's length
PER_TRANSACTION = 1000  # scheduled ahead per transaction
SIZES = (1, 10)  # events per transaction in the cost measurement
BLOCK = 50  # transactions of one variant before the next one's turn
PUBLISH, SCHEDULE = "publish", "schedule"
LATER = timedelta(hours=1)  # the cost's scheduled messages are never due during the run
PAD = "x" * 120  # payloads of about 150 bytes


# -- release lag ----------------------------------------------------------------------------
def clock_offset(engine: Engine) -> float:
    """Seconds the database's clock is ahead of this machine's."""
    with engine.connect() as conn:
        before = time.time()
        db_now: datetime = conn.execute(text("SELECT clock_timestamp()")).scalar_one()
        after = time.time()
    return db_now.timestamp() - (before + after) / 2


# Gives the messages their times once all are written (writing 25,000 takes seconds to tens of
# seconds on a loaded machine): due evenly at :rate per second from LEAD seconds after the
# statement.
TIMES = text(
    "UPDATE outbox_scheduled SET deliver_at = now() + make_interval(secs => :lead + "
    "CAST(payload->>'n' AS float8) / :rate) WHERE aggregatetype = :t "
    "RETURNING CAST(payload->>'n' AS int) AS n, CAST(id AS text) AS id, deliver_at"
)
LEAD = 2.0


def schedule_ahead(
    engine: Engine, aggregate_type: str, rate: float, seconds: float
) -> list[tuple[str, float]]:
    """Messages due evenly at ``rate`` per second for ``seconds``, from LEAD seconds after they
    are all written; each one's aggregate id is ``m-<n>``. Returns each one's event id and time
    (epoch, the database's clock), by n. Call it before the releaser starts: a commit that ends
    after the first message's time (a stalled disk) is timed again."""
    count = round(rate * seconds)
    for start in range(0, count, PER_TRANSACTION):
        numbers = range(start, min(start + PER_TRANSACTION, count))
        events = [NewEvent(aggregate_type, f"m-{n}", "Due", {"n": n, "pad": PAD}) for n in numbers]
        with Session(engine) as session, session.begin():
            UnitOfWork(session).schedule_many(events, [scheduled.due_of(None, LATER)] * len(events))
    for _ in range(3):
        with engine.begin() as conn:
            found = sorted(conn.execute(TIMES, {"lead": LEAD, "rate": rate, "t": aggregate_type}))
        with engine.connect() as conn:
            committed = conn.execute(text("SELECT now()")).scalar_one()
        if [r.n for r in found] != list(range(count)):
            raise RuntimeError(f"{len(found)} of {count:,} scheduled messages found to time")
        if committed < found[0].deliver_at:
            return [(r.id, r.deliver_at.timestamp()) for r in found]
    raise RuntimeError(f"setting the times of {count:,} messages outlasted {LEAD:g} s thrice")


class Stamps:
    """When each released message's transaction committed: the write notes the ids of the pass
    under way, the releaser's callback (called after the commit) stamps them."""

    def __init__(self, write: scheduled.Write) -> None:
        self.at: dict[str, float] = {}
        self.releaser_lags: list[float] = []
        self._write = write
        self._pass: list[str] = []

    def write(self, session: Session, rows: Sequence[Row]) -> None:
        self._pass = [str(r.id) for r in rows]
        self._write(session, rows)

    def committed(self, done: scheduled.Released) -> None:
        self.at.update(dict.fromkeys(self._pass, time.time()))
        self.releaser_lags.extend(done.lags)


def release_lag(bench: Bench, rate: float, seconds: float) -> dict[str, Any]:
    """One rate: every message's lag from its time to its release's commit and to Kafka."""
    assert bench.engine is not None
    engine = bench.engine
    aggregate_type, topic = bench.new_topic(f"due{rate:g}")
    offset = clock_offset(engine)
    stamps = Stamps(Outbox("delete").release_writer())
    policy = ReleaseSettings()  # the defaults, as a service runs its releaser
    releaser = scheduled.Releaser(
        engine,
        stamps.write,
        limit=policy.batch,
        max_rate=policy.max_rate,
        poll=policy.poll_seconds,
        on_release=stamps.committed,
        name="bench-releaser",
    )
    with Arrivals(bench.bootstrap, topic) as arrivals:
        dues = schedule_ahead(engine, aggregate_type, rate, seconds)
        releaser.start()
        try:
            wait_until(
                lambda: len(arrivals.seen) >= len(dues),
                timeout=seconds + 120,
                poll=0.5,
                what=f"{len(dues):,} scheduled messages on Kafka",
            )
        finally:
            releaser.stop()
    committed = [stamps.at[i] + offset - due for i, due in dues]
    on_kafka = [arrivals.seen[f"m-{n}"] + offset - due for n, (_, due) in enumerate(dues)]
    return {
        "rate": rate,
        "messages": len(dues),
        "due_to_committed": quantiles(committed),
        "due_to_kafka": quantiles(on_kafka),
        "releaser_lag": quantiles(stamps.releaser_lags),
        "clock_offset_seconds": offset,
    }


def quantiles(samples: Sequence[float]) -> dict[str, float]:
    """p50, p99, max and count of ``samples``, in seconds."""
    return {
        "p50": percentile(samples, 0.5),
        "p99": percentile(samples, 0.99),
        "max": max(samples),
        "count": len(samples),
    }


# -- cost -----------------------------------------------------------------------------------
def variant(action: str, size: int) -> str:
    return f"{action} {size}"


def transaction(engine: Engine, action: str, size: int, n: int) -> None:
    """One transaction that publishes or schedules ``size`` events (delete mode)."""
    events = [NewEvent("order", f"o-{n}-{k}", "Placed", {"n": n, "pad": PAD}) for k in range(size)]
    with Session(engine) as session, session.begin():
        uow = UnitOfWork(session, Outbox("delete"))
        if action == PUBLISH and size == 1:
            uow.publish(
                aggregate_type="order",
                aggregate_id=f"o-{n}",
                event_type="Placed",
                payload={"n": n, "pad": PAD},
            )
        elif action == PUBLISH:
            uow.publish_many(events)
        elif size == 1:
            uow.schedule(
                aggregate_type="order",
                aggregate_id=f"o-{n}",
                event_type="Placed",
                payload={"n": n, "pad": PAD},
                delay=LATER,
            )
        else:
            uow.schedule_many(events, [scheduled.due_of(None, LATER)] * size)


def costs(
    url: str, transactions: int, reps: int, advance: Callable[[float], None]
) -> dict[str, list[float]]:
    """Per-event microseconds of each variant per repetition: ``transactions`` of each, the
    variants taking turns every ``BLOCK`` transactions (so a change in the machine's load
    strikes them alike)."""
    from migrations.runner import upgrade

    upgrade(url)
    engine = at_commit.attach(create_engine(url, pool_size=1, max_overflow=0))
    turns = [(action, size) for size in SIZES for action in (PUBLISH, SCHEDULE)]
    found: dict[str, list[float]] = {variant(a, s): [] for a, s in turns}
    try:
        transaction(engine, SCHEDULE, 1, -1)  # warm up: connection, statements' first plans
        for _ in range(reps):
            _empty(engine)
            took = dict.fromkeys(found, 0.0)
            for first in range(0, transactions, BLOCK):
                block = range(first, min(first + BLOCK, transactions))
                for action, size in turns:
                    began = time.perf_counter()
                    for n in block:
                        transaction(engine, action, size, n)
                    took[variant(action, size)] += time.perf_counter() - began
                advance(len(block) * len(turns))
            for action, size in turns:
                events = transactions * size
                found[variant(action, size)].append(took[variant(action, size)] / events * 1e6)
        _empty(engine)  # the run's messages are due in an hour: not left behind
    finally:
        engine.dispose()
    return found


def _empty(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(text("TRUNCATE outbox, outbox_scheduled"))


# -- the scenario ---------------------------------------------------------------------------
def run(
    stack: Stack,
    cost_url: str,
    out: Path,
    *,
    rates: Sequence[float] = RATES,
    seconds: float = SECONDS,
    transactions: int = 2000,
    reps: int = 3,
) -> tuple[dict[str, Any], str]:
    """Release lag at each rate (``reps`` times, rates in turn), then the cost on ``cost_url``
    (a database of its own, no connector)."""
    lags: dict[str, list[dict[str, Any]]] = {f"{r:g}": [] for r in rates}
    total = reps * (len(rates) * seconds + len(SIZES) * 2 * transactions / 1000)
    with Bench(stack) as bench, Progress("scheduled", total) as progress:
        for rep in range(reps):
            for rate in rates:
                progress.update(f"scheduled: {rate:g} due/s for {seconds:g} s ({rep + 1}/{reps})")
                lags[f"{rate:g}"].append(release_lag(bench, rate, seconds))
                progress.advance(seconds)
        found = machine(bench.url)
        progress.update("scheduled: publish vs schedule")
        per_event = costs(cost_url, transactions, reps, lambda n: progress.advance(n / 1000))
    params = {
        "rates": list(rates),
        "seconds": seconds,
        "transactions": transactions,
        "reps": reps,
        "release": ReleaseSettings().model_dump(),
    }
    data = {
        "scenario": "scheduled",
        "params": params,
        "machine": found,
        "release_lag": lags,
        "us_per_event": {k: spread(v) | {"samples": v} for k, v in per_event.items()},
    }
    data["plots"] = [
        str(
            bar_plot(
                out / "scheduled.png",
                "Per-event time of a transaction that publishes vs one that schedules",
                {
                    f"{size} per transaction / {action}": per_event[variant(action, size)]
                    for size in SIZES
                    for action in (PUBLISH, SCHEDULE)
                },
                ylabel="µs per event",
                groups=[f"{s} per transaction" for s in SIZES],
            )
        )
    ]
    return data, summarise(data) + "\n![publish vs schedule](scheduled.png)\n"


def summarise(data: dict[str, Any]) -> str:
    """The run's markdown: both tables, the method and the machine."""
    from outboxkit_workshop.bench.figures import scheduled as tables

    return "### Scheduled messages: release lag and cost\n\n" + tables(data)
