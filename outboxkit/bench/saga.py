"""Saga benchmark: the order -> pay -> ship saga on a stack, as the demo runs it (three FastAPI
services, their connectors, three Spark jobs in one driver).

- saturation: a batch of orders POSTed as fast as 8 clients can; orders/s completed =
  orders / (last order final - first POST);
- fixed rate: orders POSTed open-loop at ``rate`` per second for ``duration`` seconds;
  POST -> final-state latency percentiles and a histogram.

Every run also checks the saga's invariants (every order final, no duplicate effects); a run
whose invariants fail raises instead of reporting figures.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from devstack.stack import Stack


def run(
    stack: Stack,
    out: Path,
    *,
    orders: int = 300,
    reps: int = 3,
    rate: float = 50.0,
    duration: float = 20.0,
    trigger: float = 0.5,
) -> tuple[dict[str, Any], str]:
    from outboxkit.bench.report import (
        Progress,
        bar_plot,
        describe,
        histogram_plot,
        machine,
        markdown_table,
        spread,
        spread_cells,
    )
    from saga.run import Placed, Report, Saga

    fixed = int(rate * duration)
    throughput: list[float] = []
    latencies: list[float] = []
    achieved = 0.0
    with tempfile.TemporaryDirectory(prefix="outboxkit-bench-saga-") as workdir:
        saga = Saga(stack, Path(workdir), echo=lambda line: None)
        total = orders * reps + fixed + 1
        with Progress("saga", total) as progress:
            try:
                progress.update("saga: databases, services, Spark jobs, warm-up order")
                saga.prepare()
                saga.start_services()
                saga.start_consumers(trigger=trigger)
                saga.warm_up()
                progress.advance(1)

                def settle(placed: list[Placed]) -> Report:
                    """Wait until every placed order is final; check the invariants."""
                    target = saga.final_count() + len(saga.not_final(placed))
                    base, shown = target - len(placed), 0

                    def show(final: int) -> None:
                        nonlocal shown
                        progress.advance(final - base - shown)
                        shown = final - base

                    saga.wait_final(target, timeout=900, progress=show)
                    report = saga.report(placed)
                    if not report.ok:
                        raise RuntimeError(f"saga invariants failed: {report}")
                    return report

                for rep in range(reps):
                    progress.update(f"saga: saturation, {orders} orders ({rep + 1}/{reps})")
                    placed = saga.place_orders(orders, seed=100 + rep, retry_share=0.0)
                    report = settle(placed)
                    finished = max(
                        p.posted_at + lat for p, lat in zip(placed, report.latencies, strict=True)
                    )
                    throughput.append(orders / (finished - min(p.posted_at for p in placed)))
                progress.update(f"saga: {fixed} orders at {rate:g}/s")
                began = time.monotonic()
                placed = saga.place_orders(
                    fixed, seed=200, concurrency=32, retry_share=0.0, rate=rate
                )
                achieved = fixed / (time.monotonic() - began)
                latencies = settle(placed).latencies
            finally:
                saga.stop()
    found = machine(stack.database_url())
    ordered = sorted(latencies)

    def pct(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    marks = {"p50": pct(0.50), "p95": pct(0.95), "p99": pct(0.99)}
    md = (
        "### Saga: order -> pay -> ship on the local stack\n\n"
        f"Saturation: {orders} orders POSTed by 8 clients as fast as the orders service answers, "
        f"{reps} repetitions; orders/s = orders / (last order final - first POST). Fixed rate: "
        f"{fixed:,} orders open-loop at {rate:g}/s (achieved {achieved:.1f}/s); latency = POST "
        f"to the order's final state (SHIPPED or CANCELLED: three hops through Debezium, Kafka "
        f"and Spark, trigger {trigger} s). Every run's invariants held.\n"
        + describe(found)
        + "\n"
        + markdown_table(
            ["measure", "min", "median", "max"],
            [["orders/s completed at saturation", *spread_cells(throughput, ",.1f")]],
        )
        + "\n"
        + markdown_table(
            ["offered rate", "orders", "p50 s", "p95 s", "p99 s", "max s"],
            [
                [
                    f"{rate:g}/s",
                    fixed,
                    *(f"{v:.2f}" for v in marks.values()),
                    f"{ordered[-1]:.2f}",
                ]
            ],
        )
    )
    data = {
        "scenario": "saga",
        "params": {
            "orders": orders,
            "reps": reps,
            "rate": rate,
            "duration": duration,
            "trigger_seconds": trigger,
        },
        "machine": found,
        "orders_per_second_at_saturation": spread(throughput) | {"samples": throughput},
        "fixed_rate": {"offered": rate, "achieved": achieved, "orders": fixed, **marks},
        "latencies_seconds": latencies,
        "plots": [
            str(
                histogram_plot(
                    out / "saga-latency.png",
                    f"POST -> final state, {fixed:,} orders at {rate:g}/s",
                    latencies,
                    xlabel="seconds",
                    marks=marks,
                )
            ),
            str(
                bar_plot(
                    out / "saga-throughput.png",
                    "Saga orders/s completed at saturation",
                    {"orders/s": throughput},
                    ylabel="orders/s",
                )
            ),
        ],
    }
    return data, md + "\n![saga latency histogram](saga-latency.png)\n"
