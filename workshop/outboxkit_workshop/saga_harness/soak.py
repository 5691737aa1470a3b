"""A soak run of the saga (`outboxkit dev soak`): orders at a steady rate for a long time, a
routine fault every few minutes, everything sampled at a fixed interval; then every order final,
the invariants and the audit (as `outboxkit dev chaos` checks them), and a verdict per series:
flat, bounded (by what the stack enforces) or growing (`outboxkit_workshop.saga_harness.trend`).

The faults, one every ``fault_every`` minutes in a seeded order (every kind once per cycle):
the routine ones (`outboxkit_workshop.saga_harness.faults.ROUTINE`: a Postgres crash, a broker
restart,
Connect's tasks restarted), a kill -9 of the consumer driver and of a service replica (a random
service). Each is repaired as in a campaign, and a probe order measures its recovery."""

from __future__ import annotations

import contextlib
import datetime
import math
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from inbox.apply import DEFAULT_WINDOW
from outboxkit_workshop.devstack.stack import Stack
from outboxkit_workshop.devstack.supervision import supervised
from outboxkit_workshop.saga_harness import chaos, faults, targets, trend
from outboxkit_workshop.saga_harness.chaos import Checks, Round
from outboxkit_workshop.saga_harness.load import Placed
from outboxkit_workshop.saga_harness.processes import Saga
from outboxkit_workshop.saga_harness.sampler import Sample, Sampler
from outboxkit_workshop.saga_harness.trend import CPU_SETTLE_SECONDS, Bound, Trend

SERVICE_KILL = "service-kill"  # a kill -9 of one replica of a random service
KINDS = (*faults.ROUTINE, "spark-kill", SERVICE_KILL)
# Spark keeps the offsets and commits of the last minBatchesToRetain micro-batches per query
# (spark.sql.streaming.minBatchesToRetain, 100 by default; each file has a .crc beside it on a
# local file system) and a few files of its own.
RETAINED_BATCHES = 100
CHECKPOINT_FILE_BYTES = 4096  # an offsets file of a query on a few topics: well under 1 KiB
JVM_HEAP_MIB = 512  # -Xmx of the stack's Kafka nodes and Connect workers
ID_ROW_BYTES = 200  # a slice row of the id window holding a single id, its index entry included


@dataclass(frozen=True)
class Limits:
    """What the stack enforces, read at the start: Postgres's WAL kept (max_wal_size +
    wal_keep_size), one WAL segment and its shared memory area (bytes), and the consumer
    queries' checkpoint folders."""

    wal_kept: float
    wal_segment: float
    checkpoint_queries: int
    shared_memory: float = 0.0


@dataclass
class Soak:
    """What a soak did and found."""

    params: dict[str, Any]
    times: list[float]  # seconds since the start, one per sample
    samples: list[Sample] = field(repr=False)
    faults: list[Round]
    checks: Checks
    trends: list[Trend]
    duration: float

    @property
    def growing(self) -> list[str]:
        return [t.series for t in self.trends if t.verdict == trend.GROWING]

    @property
    def ok(self) -> bool:
        return self.checks.ok and not self.growing

    def as_dict(self) -> dict[str, Any]:
        names = [t.series for t in self.trends]
        checks = asdict(self.checks)
        checks.pop("latencies")
        return {
            "params": self.params,
            "ok": self.ok,
            "growing": self.growing,
            "duration": self.duration,
            "checks": {
                **checks,
                "ok": self.checks.ok,
                "latency_p50": self.checks.latency(0.5),
                "latency_p99": self.checks.latency(0.99),
            },
            "faults": [asdict(r) for r in self.faults],
            "trends": [asdict(t) for t in self.trends],
            "times": self.times,
            "series": {n: [s.get(n) for s in self.samples] for n in names},
            "plots": ["soak.png"],
        }


def plan(minutes: float, fault_every: float, rng: random.Random, kinds: Sequence[str]) -> list[str]:
    """The faults of a run, one per ``fault_every`` minutes strictly within it (none at the
    start), every kind once per cycle in a shuffled order; a service kill names its service."""
    count = max(0, math.ceil(minutes / fault_every) - 1) if fault_every > 0 else 0
    return [
        f"{rng.choice(targets.SERVICES)}-kill" if kind == SERVICE_KILL else kind
        for kind in chaos.schedule(count, rng, kinds)
    ]


class Striker(threading.Thread):
    """Strikes the planned faults at their times (one every ``every`` seconds from ``started``,
    monotonic), each followed by a probe order for its recovery."""

    def __init__(self, stack: Stack, saga: Saga, kinds: list[str], every: float, seed: int) -> None:
        super().__init__(name="soak-faults")
        self.stack, self.saga, self.kinds, self.every = stack, saga, kinds, every
        self.rng = random.Random(seed)
        self.rounds: list[Round] = []
        self.probes: list[Placed] = []
        self.failure: list[BaseException] = []
        self.started = time.monotonic()

    def run(self) -> None:
        try:
            for number, kind in enumerate(self.kinds, 1):
                time.sleep(max(0.0, self.started + number * self.every - time.monotonic()))
                at = time.monotonic()
                self.saga.echo(f"fault {number}/{len(self.kinds)}: {kind}")
                struck = faults.inject(kind, self.stack, self.saga, self.rng)
                injected = time.monotonic() - at
                order, recovery = chaos.probe(self.saga, at, seed=self.rng.randrange(1 << 30))
                self.probes.append(order)
                elapsed = at - self.started
                self.rounds.append(
                    Round(number, kind, elapsed, injected, recovery, order.order_id, struck)
                )
                self.saga.echo(f"fault {number}: {kind} on {struck} recovered in {recovery:.1f}s")
        except BaseException as exc:  # raised by the run, once the load is done
            self.failure.append(exc)


def run(
    stack: Stack,
    saga: Saga,
    *,
    minutes: float,
    rate: float,
    fault_every: float,
    sample_seconds: float,
    seed: int = 1,
    kinds: Sequence[str] = KINDS,
    echo: Callable[[str], None] = print,
    final_timeout: float = 900,
    cpu_settle_seconds: float = CPU_SETTLE_SECONDS,
) -> Soak:
    """Orders at ``rate`` per second for ``minutes``, a fault of ``kinds`` every ``fault_every``
    minutes, a sample every ``sample_seconds``; then the checks and the series' trends (a
    process's CPU judged once it has run ``cpu_settle_seconds``)."""
    rng = random.Random(seed)
    planned = plan(minutes, fault_every, rng, kinds)
    shape = chaos.shape_of(stack, saga)
    faults.check([k for k in planned if k in faults.BY_NAME], shape)
    sampler = Sampler(stack, saga, datetime.datetime.now(datetime.UTC), cpu_settle_seconds)
    wal_kept, wal_segment, shared_memory = sampler.limits()
    duration = minutes * 60
    load = chaos.Load(saga, round(duration * rate), rate=rate, seed=seed)
    striker = Striker(stack, saga, planned, fault_every * 60, rng.randrange(1 << 30))
    times: list[float] = []
    samples: list[Sample] = []
    # The connector supervisor runs beside the saga, as a deployment runs it.
    with supervised(stack, echo=echo), contextlib.closing(sampler):
        striker.start()
        started = striker.started
        while time.monotonic() - started < duration or load.thread.is_alive():
            time.sleep(max(0.0, started + len(times) * sample_seconds - time.monotonic()))
            samples.append(sampler.sample(sample_seconds))
            times.append(time.monotonic() - started)
            echo(progress(times[-1], samples[-1]))
        striker.join()
        placed = load.join()
    if striker.failure:
        raise RuntimeError(f"a fault failed: {striker.failure[0]!r}") from striker.failure[0]
    checks = chaos.final_checks(
        saga, placed, striker.probes, striker.rounds, echo=echo, timeout=final_timeout
    )
    queries = sum(1 for p in (saga.workdir / "checkpoints").glob("*") if p.is_dir())
    limits = Limits(wal_kept, wal_segment, queries, shared_memory)
    params = {
        "minutes": minutes,
        "rate": rate,
        "fault_every": fault_every,
        "sample_seconds": sample_seconds,
        "seed": seed,
        "cpu_settle_seconds": cpu_settle_seconds,
    }
    return Soak(
        params, times, samples, striker.rounds, checks, analyse(times, samples, limits), duration
    )


def analyse(times: Sequence[float], samples: Sequence[Sample], limits: Limits) -> list[Trend]:
    """Each series' trend, by family then name, with the bound the stack puts on it."""
    order = list(trend.FAMILIES)
    names = sorted({n for s in samples for n in s}, key=lambda n: (order.index(n.split(":")[0]), n))
    series = {n: [s.get(n) for s in samples] for n in names}
    found = bounds(times, series, limits)
    return [trend.trend(n, times, series[n], found.get(n)) for n in names]


def bounds(
    times: Sequence[float], series: Mapping[str, Sequence[float | None]], limits: Limits
) -> dict[str, Bound]:
    """The bound of each series something in the stack keeps from growing for ever."""
    found: dict[str, Bound] = {}
    files = limits.checkpoint_queries * (2 * 2 * (RETAINED_BATCHES + 1) + 16)
    found["folder files:checkpoints"] = Bound(
        files, f"minBatchesToRetain {RETAINED_BATCHES}: {limits.checkpoint_queries} queries"
    )
    found["folder bytes:checkpoints"] = Bound(
        files * CHECKPOINT_FILE_BYTES, f"{files:,} files of at most {CHECKPOINT_FILE_BYTES} B"
    )
    lags = [v for n, s in series.items() if n.startswith("slot lag:") for v in s if v is not None]
    found["folder bytes:pg_wal"] = Bound(
        limits.wal_kept + max(lags, default=0.0) + 2 * limits.wal_segment,
        "max_wal_size + wal_keep_size + the slots' largest lag",
    )
    nothing = [None] * len(times)
    orders = series.get("orders:placed", nothing)
    for name, why in (
        ("kafka", "log.retention.hours 168: the events kept; 1.5x the first half's per order"),
        ("pgdata", "the business rows kept, the WAL; 1.5x the first half's per order"),
    ):
        per_order = trend.per_order(times, series.get(f"folder bytes:{name}", nothing), orders)
        if per_order is not None:
            found[f"folder bytes:{name}"] = Bound(per_order, why)
    for name in series:
        if name.startswith(("rss:kafka", "rss:connect")):
            found[name] = Bound(2 * JVM_HEAP_MIB, f"-Xmx{JVM_HEAP_MIB}m heap, 2x for the JVM")
        if name.startswith("shared:") and limits.shared_memory:
            slack = trend.family(name).slack  # dynamic segments beside the main area
            found[name] = Bound(
                limits.shared_memory / trend.MIB + slack,
                f"Postgres's shared memory area (shared_buffers in it), {slack:g} MiB more",
            )
        if name.startswith("table rows:") and name.endswith(".inbox_recent"):
            watermarks = series.get(name.replace("inbox_recent", "inbox_watermark"), [])
            partitions = max((v for v in watermarks if v is not None), default=0.0)
            rows = partitions * (DEFAULT_WINDOW + 1)
            why = f"id window of {DEFAULT_WINDOW:,} offsets per partition"
            found[name] = Bound(rows, why)
            found[name.replace("table rows:", "table bytes:")] = Bound(
                rows * ID_ROW_BYTES, f"{why}, {ID_ROW_BYTES} B a row"
            )
    return found


def progress(at: float, sample: Sample) -> str:
    """One compact line per sample: the run is alive, and where it stands."""

    def total(family: str) -> float:
        return sum(v for n, v in sample.items() if n.startswith(f"{family}:"))

    lags = [v for n, v in sample.items() if n.startswith("slot lag:")]
    p50 = sample.get("latency:p50")
    return (
        f"{at / 60:5.1f} min  orders {sample.get('orders:placed', 0):,.0f} placed "
        f"{sample.get('orders:final', 0):,.0f} final  p50 "
        f"{'-' if p50 is None else f'{p50:.1f}s'}  rss {total('rss'):,.0f} MiB  fds "
        f"{total('fds'):,.0f}  threads {total('threads'):,.0f}  cpu "
        f"{total('cpu') + total('cpu warming'):,.0f}% lag "
        f"{max(lags, default=0) / trend.MIB:.1f} MiB  ckpt "
        f"{sample.get('folder files:checkpoints', 0):,.0f} files  kafka "
        f"{sample.get('folder bytes:kafka', 0) / trend.MIB:,.0f} MiB"
    )
