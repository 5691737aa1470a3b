"""Saga benchmark: the order -> pay -> ship saga on a stack, as the demo runs it (three FastAPI
services, their connectors, three Spark jobs in one driver).

- fixed rates: orders POSTed open-loop at each rate for ``duration`` seconds, ``reps`` times;
  POST -> final state latency percentiles, per-hop medians and a histogram per rate;
- step load: rising rates held for ``step_seconds`` each; capacity = the highest rate held
  (POSTs keep the rate, 98% of orders final by the step's end + a grace, p99 not growing).

Every run also checks the saga's invariants (every order final, no duplicate effects); a run
whose invariants fail raises instead of reporting figures.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from outboxkit.kernel.wire.record import topic_for
from outboxkit_workshop.bench.arrivals import Arrivals
from outboxkit_workshop.bench.hops import HOPS, batch_phases, first_hop_stages, hop_seconds
from outboxkit_workshop.bench.report import (
    Progress,
    describe,
    histogram_plot,
    machine,
    markdown_table,
    percentile,
    spread,
)
from outboxkit_workshop.bench.usage import own_ticks
from outboxkit_workshop.devstack.stack import Stack
from outboxkit_workshop.saga import rules
from outboxkit_workshop.saga_harness.invariants import Report
from outboxkit_workshop.saga_harness.load import Placed
from outboxkit_workshop.saga_harness.processes import SAGA_TRIGGER_SECONDS, SKUS, Saga
from spark_consumers.progress import PHASES

GRACE_SECONDS = 5.0  # a step's orders may finish this long after its last POST
# A step counts toward the capacity target only when held with its p99 at most this (the
# target: a step load held 60 s with p99 <= 5 s in the step); the bench's own rule (held) only asks
# that latency did not grow through the step.
TARGET_P99_SECONDS = 5.0
# Load at the first fixed rate between the burst's drain and the measured runs, not measured:
# the first ~10 s of orders after the consumers drained the burst took 2-3x as long as those
# that followed (p99 3.5-4.5 s against 1.6-1.9 s at 10 orders/s), whichever run came first.
WARM_SECONDS = 30.0


def step_verdict(
    rate: float, duration: float, placed: list[Any], latencies: list[float]
) -> dict[str, Any]:
    """Whether a step of ``rate`` orders/s for ``duration`` s was held: POSTs kept the rate,
    >= 98% of the orders were final by the step's end + GRACE_SECONDS, and the p99 of the
    second half of the step did not grow past 1.5x the first half's (+0.5 s). ``within_target``:
    held, and the step's p99 at most TARGET_P99_SECONDS."""
    began = min(p.posted_at for p in placed)
    finished = [p.posted_at + lat for p, lat in zip(placed, latencies, strict=True)]
    in_time = sum(1 for f in finished if f <= began + duration + GRACE_SECONDS)
    half = began + duration / 2
    first = [lat for p, lat in zip(placed, latencies, strict=True) if p.posted_at < half]
    second = [lat for p, lat in zip(placed, latencies, strict=True) if p.posted_at >= half]
    posted_rate = len(placed) / max(1e-9, max(p.posted_at for p in placed) - began)
    p99_first, p99_second = percentile(first, 0.99), percentile(second, 0.99)
    held = (
        posted_rate >= 0.98 * rate
        and in_time >= 0.98 * len(placed)
        and p99_second <= 1.5 * p99_first + 0.5
    )
    p99 = percentile(latencies, 0.99)
    return {
        "rate": rate,
        "posted_rate": posted_rate,
        "completed_rate": in_time / duration,
        "completed_in_time": in_time / len(placed),
        "p50": percentile(latencies, 0.5),
        "p99": p99,
        "p99_first_half": p99_first,
        "p99_second_half": p99_second,
        "held": held,
        "within_target": held and p99 <= TARGET_P99_SECONDS,
    }


def percentiles(samples: list[float]) -> dict[str, float]:
    return {
        name: percentile(samples, q)
        for name, q in (("p50", 0.50), ("p95", 0.95), ("p99", 0.99), ("max", 1.0))
    }


def _settle(
    saga: Saga, placed: list[Placed], progress: Progress, warm: list[Placed] | None = None
) -> Report:
    """Wait until every placed order is final; check the invariants (raise when they fail);
    ``warm``: orders placed after ``placed`` that the checks must count too."""
    shown = 0

    def show(final: int) -> None:
        nonlocal shown
        progress.advance(final - shown)
        shown = final

    saga.wait_final(placed, timeout=900, progress=show)
    report = saga.report(placed, warm=warm)
    if not report.ok:
        raise RuntimeError(
            f"saga invariants failed: {report.by_status}, duplicates {report.duplicates}, "
            f"violations {report.violations}"
        )
    return report


def _self_ticks() -> float:
    """Clock ticks of this process alone (the load generator), not of its descendants."""
    fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    return float(fields[11]) + float(fields[12])


def process_ticks(saga: Saga) -> dict[str, float]:
    """Clock ticks used so far by each of the saga's processes (each service, the consumer
    driver with its JVM and Python workers) and the stack's (Postgres with its backends, each
    engine's nodes), and by this process, the load generator."""
    state = saga.stack.state
    groups: dict[str, list[int]] = {name: [pid] for name, pid in saga.pids.items() if pid}
    for label, component in (("Postgres", state.postgres), ("Kafka", state.broker)):
        groups[label] = [node.pid for node in component.nodes if node.pid]
    groups["Connect + Debezium"] = [node.pid for node in state.connect.nodes if node.pid]
    ticks = {name: sum(own_ticks(pid) for pid in pids) for name, pids in groups.items() if pids}
    return {**ticks, "load generator": _self_ticks()}


def fixed_rate(saga: Saga, rate: float, duration: float, seed: int, progress: Progress) -> Any:
    """Orders POSTed open-loop at ``rate`` for ``duration`` s: latency percentiles, hops, where
    hop 1's time goes (when each OrderPlaced became visible in Kafka; batch phases), and the CPU
    each process spent per order, from the first POST until every order was final."""
    count = int(rate * duration)
    order_topic = topic_for(rules.ORDER, topic_prefix=saga.stack.settings.topic_prefix)
    since = datetime.now()
    with Arrivals(saga.stack.bootstrap_servers(), order_topic) as arrivals:
        ticks = process_ticks(saga)
        began = time.monotonic()
        placed = saga.place_orders(count, seed=seed, concurrency=32, retry_share=0.0, rate=rate)
        achieved = count / (time.monotonic() - began)
        latencies = _settle(saga, placed, progress).latencies
        used = {k: v - ticks.get(k, v) for k, v in process_ticks(saga).items()}
    per_order = {k: 1000 * v / os.sysconf("SC_CLK_TCK") / count for k, v in used.items()}
    ids = [p.order_id for p in placed]
    hops = hop_seconds(saga, ids)
    return {
        "hops_p50": {h: percentiles(v)["p50"] for h, v in hops.items() if v},
        "hop1_stages": first_hop_stages(saga, ids, arrivals.seen),
        "batch_phases_ms": batch_phases(saga.workdir / "consumers.log", since),
        "orders": count,
        "cpu_ms_per_order": per_order,
        "achieved_rate": achieved,
        **percentiles(latencies),
        "latencies_seconds": latencies,
    }


def _step(saga: Saga, rate: float, seconds: float, seed: int, progress: Progress) -> dict[str, Any]:
    """One step of the step load; a POST that fails or times out (the service overloaded) ends
    the step as not held, with the error."""
    try:
        placed = saga.place_orders(
            int(rate * seconds), seed=seed, concurrency=64, retry_share=0.0, rate=rate
        )
    except httpx.HTTPError as exc:
        nan = float("nan")
        return {
            "rate": rate,
            "posted_rate": nan,
            "completed_rate": nan,
            "completed_in_time": nan,
            "p50": nan,
            "p99": nan,
            "p99_first_half": nan,
            "p99_second_half": nan,
            "held": False,
            "within_target": False,
            "error": f"{type(exc).__name__}: {exc}",
        }
    latencies = _settle(saga, placed, progress).latencies
    return step_verdict(rate, seconds, placed, latencies)


def run(
    stack: Stack,
    out: Path,
    *,
    reps: int = 2,
    rates: tuple[float, ...] = (10.0, 50.0),
    duration: float = 20.0,
    steps: tuple[float, ...] = (25.0, 50.0, 100.0, 200.0, 400.0),
    step_seconds: float = 60.0,
    trigger: float = SAGA_TRIGGER_SECONDS,
    post_orders: int = 2000,
) -> tuple[dict[str, Any], str]:
    """The orders service's POST rate alone (closed loop, before the consumers start), fixed
    rates (``reps`` times each, interleaved), then a step load that stops at the first
    step not held."""
    runs: dict[float, list[dict[str, Any]]] = {rate: [] for rate in rates}
    stepped: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="outboxkit-bench-saga-") as workdir:
        saga = Saga(stack, Path(workdir), echo=lambda line: None)
        total = reps * sum(int(r * duration) for r in rates) + 1 + post_orders
        total += sum(int(r * step_seconds) for r in steps) + int(rates[0] * WARM_SECONDS)
        with Progress("saga", total) as progress:
            try:
                progress.update("saga: databases, services")
                # Every run starts from the same stock: on a stack used before, the plentiful
                # SKUs can be sold out, every order would end CANCELLED and no hop be timed.
                saga.prepare(stock=dict(SKUS))
                saga.start_services()
                progress.update(f"saga: POST rate alone, {post_orders} orders, 32 clients")
                began = time.monotonic()
                burst = saga.place_orders(post_orders, seed=100, concurrency=32, retry_share=0.0)
                post_rate = post_orders / (time.monotonic() - began)
                progress.update("saga: Spark jobs, warm-up order, the burst's orders settle")
                saga.start_consumers(trigger=trigger)
                warm = saga.warm_up()
                _settle(saga, burst, progress, warm=[warm])
                progress.advance(1)
                progress.update(f"saga: {rates[0]:g}/s for {WARM_SECONDS:g} s, not measured")
                warming = fixed_rate(saga, rates[0], WARM_SECONDS, 190, progress)
                for rep in range(reps):
                    for n, rate in enumerate(rates):
                        progress.update(f"saga: {rate:g}/s for {duration:g} s ({rep + 1}/{reps})")
                        runs[rate].append(
                            fixed_rate(saga, rate, duration, 200 + 10 * rep + n, progress)
                        )
                for n, rate in enumerate(steps):
                    progress.update(f"saga: step load {rate:g}/s for {step_seconds:g} s")
                    stepped.append(_step(saga, rate, step_seconds, 500 + n, progress))
                    if not stepped[-1]["held"]:
                        break
            finally:
                saga.stop()
    return _report(
        out, stack, runs, stepped, post_rate, reps, duration, step_seconds, trigger, warming
    )


def _report(
    out: Path,
    stack: Stack,
    runs: dict[float, list[dict[str, Any]]],
    stepped: list[dict[str, Any]],
    post_rate: float,
    reps: int,
    duration: float,
    step_seconds: float,
    trigger: float,
    warming: dict[str, Any],
) -> tuple[dict[str, Any], str]:
    found = machine(stack.database_url())
    first = next(iter(runs))
    capacity = max((s["rate"] for s in stepped if s["held"]), default=0.0)
    capacity_target = max((s["rate"] for s in stepped if s["within_target"]), default=0.0)
    md = (
        "### Saga: order -> pay -> ship on the local stack\n\n"
        f"Fixed rates: orders POSTed open-loop for {duration:g} s, {reps} repetitions each "
        "(median of the repetitions' percentiles); latency = POST to the order's final state "
        "(SHIPPED or CANCELLED: three to five hops through Debezium, Kafka and Spark, trigger "
        f"{trigger} s). Before them, {WARM_SECONDS:g} s at {first:g}/s after the consumers "
        "drained the burst of the POST rate measurement, not counted (its p50 / p99: "
        f"{warming['p50']:.2f} / {warming['p99']:.2f} s). Step load: {step_seconds:g} s per "
        "rate, stopping at the first rate not "
        f"held (POSTs at >= 0.98x the rate, >= 98% of the orders final within "
        f"{GRACE_SECONDS:g} s of the step's end, p99 of its second half <= 1.5x the first's "
        "+ 0.5 s). Every run's invariants held (every order final, no effect applied twice).\n"
        + describe(found)
        + "\n"
        + markdown_table(
            ["offered rate", "achieved", "orders/run", "p50 s", "p95 s", "p99 s", "max s"],
            [
                [
                    f"{rate:g}/s",
                    f"{_median(r, 'achieved_rate'):.1f}/s",
                    r[0]["orders"],
                    *(f"{_median(r, k):.2f}" for k in ("p50", "p95", "p99", "max")),
                ]
                for rate, r in runs.items()
            ],
        )
        + "\nMedian seconds per hop of SHIPPED orders, from the transaction that published the "
        "event to the one that applied it (Debezium, Kafka, a Spark micro-batch, the inbox "
        "transaction):\n\n"
        + markdown_table(
            ["hop", *(f"p50 at {rate:g}/s" for rate in runs)],
            [[hop, *(f"{_median_hop(r, hop):.2f}" for r in runs.values())] for hop in HOPS],
        )
        + "\nWhere hop 1's time goes (OrderPlaced -> payments), medians over the runs; the "
        "first two rows are medians over SHIPPED and other orders, read by a side consumer; "
        "the rest are Spark's phase durations (ms) of the consumer driver's batches with input "
        "(the inbox transactions run inside addBatch):\n\n"
        + markdown_table(
            ["stage", *(f"at {rate:g}/s" for rate in runs)],
            _stage_rows(runs),
        )
        + "\nCPU per order by process (ms; user + system, each process with its children, "
        "from the first POST until every order was final, medians over the runs; the consumer "
        "driver includes its JVM and the Python workers):\n\n"
        + markdown_table(
            ["process", *(f"at {rate:g}/s" for rate in runs)],
            _cpu_rows(runs),
        )
        + f"\nStep load: capacity (highest rate held) **{capacity:g} orders/s**; held with the "
        f"step's p99 <= {TARGET_P99_SECONDS:g} s (the capacity target): "
        f"**{capacity_target:g} orders/s**; the orders service alone answered "
        f"**{post_rate:,.0f} POST /orders per second** (32 clients, closed loop, before the "
        "consumers started).\n\n"
        + markdown_table(
            [
                "offered",
                "POSTed",
                "completed",
                "final in time",
                "p50 s",
                "p99 s",
                "p99 1st half",
                "p99 2nd half",
                "held",
            ],
            [
                [
                    f"{s['rate']:g}/s",
                    f"{s['posted_rate']:.1f}/s",
                    f"{s['completed_rate']:.1f}/s",
                    f"{100 * s['completed_in_time']:.1f}%",
                    f"{s['p50']:.2f}",
                    f"{s['p99']:.2f}",
                    f"{s['p99_first_half']:.2f}",
                    f"{s['p99_second_half']:.2f}",
                    "yes" if s["held"] else f"no{': ' + s['error'] if 'error' in s else ''}",
                ]
                for s in stepped
            ],
        )
    )
    plots = [
        histogram_plot(
            out / f"saga-latency-{rate:g}.png",
            f"POST -> final state, {r[0]['orders']:,} orders offered at {rate:g}/s (run 1)",
            r[0]["latencies_seconds"],
            xlabel="seconds",
            marks={k: r[0][k] for k in ("p50", "p95", "p99")},
        )
        for rate, r in runs.items()
    ]
    data = {
        "scenario": "saga",
        "params": {
            "reps": reps,
            "rates": list(runs),
            "duration": duration,
            "step_seconds": step_seconds,
            "trigger_seconds": trigger,
        },
        "machine": found,
        "fixed_rates": {f"{rate:g}": r for rate, r in runs.items()},
        "warm_up": {
            "seconds": WARM_SECONDS,
            **{k: warming[k] for k in ("p50", "p95", "p99", "max", "achieved_rate")},
        },
        "step_load": stepped,
        "capacity_orders_per_second": capacity,
        "capacity_within_target_orders_per_second": capacity_target,
        "post_rate_alone": post_rate,
        "plots": [str(p) for p in plots],
    }
    images = "".join(f"\n![saga latency at {r:g}/s](saga-latency-{r:g}.png)\n" for r in runs)
    return data, md + images


def _cpu_rows(runs: dict[float, list[dict[str, Any]]]) -> list[list[str]]:
    """A row per process (the busiest first at the highest rate) and their total."""
    medians = {
        rate: {
            name: statistics.median(run["cpu_ms_per_order"].get(name, 0.0) for run in r)
            for name in r[0]["cpu_ms_per_order"]
        }
        for rate, r in runs.items()
    }
    last = medians[max(medians)]
    rows = [
        [name, *(f"{m.get(name, 0.0):.1f}" for m in medians.values())]
        for name in sorted(last, key=lambda n: -last[n])
    ]
    return [*rows, ["all", *(f"{sum(m.values()):.1f}" for m in medians.values())]]


def _stage_rows(runs: dict[float, list[dict[str, Any]]]) -> list[list[str]]:
    stages = ("commit -> visible in Kafka", "in Kafka -> inbox transaction begins")
    rows = [
        [f"{stage} (s)", *(f"{_median_of(r, 'hop1_stages', stage):.2f}" for r in runs.values())]
        for stage in stages
    ]
    rows += [
        [
            f"batch {phase} (ms)",
            *(f"{_median_of(r, 'batch_phases_ms', phase):.0f}" for r in runs.values()),
        ]
        for phase in PHASES
    ]
    return rows


def _median_of(runs: list[dict[str, Any]], group: str, key: str) -> float:
    values = [r[group][key] for r in runs if key in r[group]]
    return float(spread(values)["median"]) if values else float("nan")


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return float(spread([r[key] for r in runs])["median"])


def _median_hop(runs: list[dict[str, Any]], hop: str) -> float:
    values = [r["hops_p50"][hop] for r in runs if hop in r["hops_p50"]]
    return float(spread(values)["median"]) if values else float("nan")
