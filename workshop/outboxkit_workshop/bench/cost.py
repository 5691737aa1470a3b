"""Cost benchmark: the CPU an order costs, per component of the saga's stack, and what the
stack costs with no orders at all.

Each component's clock ticks (user + system, /proc) are read before and after a phase:
- idle: no orders, ``idle_seconds`` once every order before it is final;
- a fixed rate: orders POSTed open-loop at the rate for ``duration`` s, from the first POST
  until every order is final (and the invariants hold: a run whose checks fail raises).

The consumer driver is split into its Python process, its JVM (which runs Spark's driver and,
on ``local[2]``, its executors; with the processes it ran and reaped) and its Python workers;
the share of each JVM's time spent in its JIT compiler and GC threads is read per thread.

Levers are measured beside the defaults in the same run (each repetition takes every variant
in turn): the consumers' trigger, Debezium's ``poll.interval.ms``, Connect's exactly-once
transaction boundary, Hadoop's own local file system for the checkpoints, and the consumer
JVM's JIT limited to its first tier. The consumers are
started afresh for each variant and given ``warm_seconds`` of orders, not measured, so that
the JVMs' JIT compilation of the first minutes is not counted as the variant's cost.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from outboxkit_workshop.bench.report import Progress, machine, percentile
from outboxkit_workshop.devstack.processes import process_children, process_tree
from outboxkit_workshop.devstack.stack import Stack
from outboxkit_workshop.saga_harness import proc
from outboxkit_workshop.saga_harness.processes import SAGA_TRIGGER_SECONDS, SKUS, Saga

HZ = os.sysconf("SC_CLK_TCK")
RATES = (10.0, 50.0, 100.0, 200.0)
LEVER_RATES = (10.0, 50.0)  # a lever's variant: idle and these rates
POLL_INTERVAL_MS = "poll.interval.ms"
JIT = re.compile(r"^C[12] CompilerThre")
GC = re.compile(r"^(GC Thread|G1 |VM Thread|GC |VM Periodic)")
# Targets of the cost (ms of CPU per order, whole stack, the load generator apart; idle: % of
# one core).
TARGETS_MS = {10.0: 30.0, 50.0: 12.0}
IDLE_TARGET_PERCENT = 5.0


@dataclass(frozen=True)
class Variant:
    """A setting measured against the defaults: the consumers' trigger, connector settings."""

    name: str
    trigger: float = SAGA_TRIGGER_SECONDS
    connector: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)  # the consumer driver's
    rates: tuple[float, ...] = LEVER_RATES


DEFAULTS = Variant("defaults", rates=RATES)
# Each lever by the key `outboxkit dev bench cost --cost-levers` names it with.
LEVERS = {
    "poll": Variant(
        "Debezium poll.interval.ms 200 (default 50)", connector={POLL_INTERVAL_MS: "200"}
    ),
    "trigger": Variant(f"trigger 0.5 s (default {SAGA_TRIGGER_SECONDS:g} s)", trigger=0.5),
    # Each exactly-once source task commits a Kafka transaction per poll that returned records
    # (KIP-618's default boundary): markers on every partition it wrote and on the offsets topic.
    "boundary": Variant(
        "Connect's exactly-once transactions: one per 250 ms (default: one per poll)",
        connector={"transaction.boundary": "interval", "transaction.boundary.interval.ms": "250"},
    ),
    # Hadoop's own local file system starts a chmod process for each checkpoint file it writes.
    "hadoop-fs": Variant(
        "checkpoints through Hadoop's local file system (a chmod process per file)",
        env={"OUTBOXKIT_SPARK_FORKLESS_FS": "false"},
    ),
    "c1": Variant(
        "consumer JVM's JIT: C1 only (-XX:TieredStopAtLevel=1)",
        env={"JAVA_TOOL_OPTIONS": "-XX:TieredStopAtLevel=1"},
    ),
}


def variants(levers: Sequence[str] | None = None) -> tuple[Variant, ...]:
    """The defaults and the levers named (every one when None), in `LEVERS`' order."""
    unknown = sorted(set(levers or ()) - set(LEVERS))
    if unknown:
        raise ValueError(f"unknown cost levers {unknown}: choose among {sorted(LEVERS)}")
    return (DEFAULTS, *(v for k, v in LEVERS.items() if levers is None or k in levers))


# -- reading /proc ----------------------------------------------------------------------------
def _stat(path: str) -> list[str] | None:
    try:
        return Path(path).read_text().rsplit(")", 1)[1].split()
    except OSError:  # gone meanwhile
        return None


def _ticks(pid: int, *, reaped: bool) -> float:
    """``pid``'s own ticks, with its reaped children's when ``reaped``."""
    fields = _stat(f"/proc/{pid}/stat")
    if fields is None:
        return 0.0
    return sum(float(x) for x in fields[11 : 15 if reaped else 13])


def _threads(pid: int) -> Iterator[tuple[str, float]]:
    """(name, ticks) of each of ``pid``'s threads."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return
    for task in tasks:
        try:
            text = (task / "stat").read_text()
        except OSError:
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        fields = text.rsplit(")", 1)[1].split()
        yield name, float(fields[11]) + float(fields[12])


def read_ticks(saga: Saga) -> dict[str, float]:
    """Ticks used so far by each component: each service (with its descendants), the consumer
    driver's Python process, its JVM, its Python workers, Postgres, Kafka, Connect; and
    ``<component> JIT`` / ``<component> GC`` for each JVM's compiler and GC threads."""
    tree = process_children()
    state = saga.stack.state
    out: dict[str, float] = {}
    jvms: dict[str, list[int]] = {}
    for name, pid in saga.pids.items():
        if not pid:
            continue
        if name != "consumers":
            out[name] = sum(_ticks(p, reaped=True) for p in process_tree(pid, tree))
            continue
        out["consumer driver (Python)"] = _ticks(pid, reaped=False)
        for jvm in (c for c in tree.get(pid, []) if proc.command(c) == "java"):
            workers = [p for c in tree.get(jvm, []) for p in process_tree(c, tree)]
            out["consumer driver (Spark JVM)"] = _ticks(jvm, reaped=True)
            out["consumer Python workers"] = sum(_ticks(p, reaped=True) for p in workers)
            jvms["consumer driver (Spark JVM)"] = [jvm]
    for label, component in (
        ("Postgres", state.postgres),
        ("Kafka", state.broker),
        ("Connect + Debezium", state.connect),
    ):
        pids = [node.pid for node in component.nodes if node.pid]
        out[label] = sum(_ticks(p, reaped=True) for root in pids for p in process_tree(root, tree))
        if label != "Postgres":
            jvms[label] = pids
    for label, pids in jvms.items():
        threads = [t for pid in pids for t in _threads(pid)]
        out[f"{label} JIT"] = sum(ticks for name, ticks in threads if JIT.match(name))
        out[f"{label} GC"] = sum(ticks for name, ticks in threads if GC.match(name))
    return out


def used_ms(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """Milliseconds of CPU per component between two `read_ticks`."""
    return {k: 1000 * (v - before.get(k, v)) / HZ for k, v in after.items()}


# -- phases -------------------------------------------------------------------------------------
def idle(saga: Saga, seconds: float) -> dict[str, Any]:
    """The stack with no orders for ``seconds``: % of one core per component."""
    time.sleep(5)  # the last orders' replies and the consumers' last batches
    before, began = read_ticks(saga), time.monotonic()
    time.sleep(seconds)
    used, elapsed = used_ms(before, read_ticks(saga)), time.monotonic() - began
    return {"seconds": elapsed, "percent": {k: v / 10 / elapsed for k, v in used.items()}}


def at_rate(saga: Saga, rate: float, seconds: float, seed: int) -> dict[str, Any]:
    """Orders at ``rate`` for ``seconds``: CPU ms per order per component, latencies."""
    count = int(rate * seconds)
    before = read_ticks(saga)
    began = time.monotonic()
    placed = saga.place_orders(count, seed=seed, concurrency=64, retry_share=0.0, rate=rate)
    achieved = count / (time.monotonic() - began)
    pending = saga.wait_final(placed, timeout=600)
    report = saga.report(placed)
    if pending or not report.ok:
        raise RuntimeError(
            f"saga at {rate:g}/s: {len(pending)} orders not final, {report.by_status}, "
            f"duplicates {report.duplicates}, violations {report.violations}"
        )
    used = used_ms(before, read_ticks(saga))
    return {
        "rate": rate,
        "orders": count,
        "achieved_rate": achieved,
        "ms_per_order": {k: v / count for k, v in used.items()},
        "p50": percentile(report.latencies, 0.5),
        "p99": percentile(report.latencies, 0.99),
    }


@contextmanager
def connector_settings(stack: Stack, settings: Mapping[str, str]) -> Iterator[None]:
    """Every connector of the stack with ``settings`` for the block, then as it was."""
    if not settings:
        yield
        return
    client = stack.connect_client()
    saved = {name: client.get_config(name) or {} for name in client.connectors()}
    try:
        for name, config in saved.items():
            client.put_config(name, {**config, **settings})
            client.wait_running(name, timeout=60)
        yield
    finally:
        for name, config in saved.items():
            client.put_config(name, config)
            client.wait_running(name, timeout=60)
        client.close()


def variant_run(
    saga: Saga,
    variant: Variant,
    *,
    seconds: float,
    idle_seconds: float,
    warm_seconds: float,
    seed: int,
    progress: Progress,
) -> dict[str, Any]:
    """One variant once: consumers started afresh with its trigger, connectors with its
    settings, ``warm_seconds`` at 50/s not measured, then idle and each rate."""
    progress.update(f"cost: {variant.name}: consumers, warm-up")
    saga.stop(["consumers"], dispose=False)
    saga.start_consumers(trigger=variant.trigger, env=variant.env)
    with connector_settings(saga.stack, variant.connector):
        saga.warm_up()
        warm = saga.place_orders(
            int(50 * warm_seconds), seed=seed, concurrency=64, retry_share=0.0, rate=50
        )
        saga.wait_final(warm, timeout=600)
        progress.update(f"cost: {variant.name}: idle {idle_seconds:g} s")
        result: dict[str, Any] = {"variant": variant.name, "idle": idle(saga, idle_seconds)}
        progress.advance(1)
        result["rates"] = []
        for n, rate in enumerate(variant.rates):
            progress.update(f"cost: {variant.name}: {rate:g} orders/s for {seconds:g} s")
            result["rates"].append(at_rate(saga, rate, seconds, seed + 1 + n))
            progress.advance(1)
    return result


def run(
    stack: Stack,
    out: Path,
    *,
    reps: int = 2,
    seconds: float = 20.0,
    idle_seconds: float = 30.0,
    warm_seconds: float = 45.0,
    levers: Sequence[str] | None = None,
) -> tuple[dict[str, Any], str]:
    """``reps`` repetitions, each taking the defaults and the ``levers`` named (`LEVERS`;
    None: every one) in turn."""
    chosen = variants(levers)
    from outboxkit_workshop.bench import cost_figures

    runs: list[dict[str, Any]] = []
    steps = reps * sum(1 + len(v.rates) for v in chosen)
    with tempfile.TemporaryDirectory(prefix="outboxkit-bench-cost-") as workdir:
        saga = Saga(stack, Path(workdir), echo=lambda line: None)
        with Progress("cost", steps) as progress:
            try:
                progress.update("cost: databases, services")
                saga.prepare(stock=dict(SKUS))
                saga.start_services()
                for rep in range(reps):
                    for n, variant in enumerate(chosen):
                        seed = 1000 * (rep + 1) + 100 * n
                        runs.append(
                            {
                                "rep": rep,
                                **variant_run(
                                    saga,
                                    variant,
                                    seconds=seconds,
                                    idle_seconds=idle_seconds,
                                    warm_seconds=warm_seconds,
                                    seed=seed,
                                    progress=progress,
                                ),
                            }
                        )
            finally:
                saga.stop()
    data = {
        "scenario": "cost",
        "params": {
            "reps": reps,
            "seconds": seconds,
            "idle_seconds": idle_seconds,
            "warm_seconds": warm_seconds,
            "trigger_seconds": SAGA_TRIGGER_SECONDS,
            "targets_ms_per_order": {f"{k:g}": v for k, v in TARGETS_MS.items()},
            "idle_target_percent": IDLE_TARGET_PERCENT,
            "levers": None if levers is None else [k for k in LEVERS if k in levers],
        },
        "machine": machine(stack.database_url()),
        "runs": runs,
    }
    return data, cost_figures.render(data)
