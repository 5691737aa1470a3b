"""Saga benchmark: the order -> pay -> ship saga on a stack, as the demo runs it (three FastAPI
services, their connectors, three Spark jobs in one driver).

- saturation: a batch of orders POSTed as fast as 8 clients can; orders/s completed in the
  steady state = 80% of the orders / (time the 90th percentile order became final - time the
  10th did), which leaves out the pipeline filling and draining at both ends;
- fixed rates: orders POSTed open-loop at each rate for ``duration`` seconds; POST -> final
  state latency percentiles and a histogram per rate.

Every run also checks the saga's invariants (every order final, no duplicate effects); a run
whose invariants fail raises instead of reporting figures.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from devstack.stack import Stack


def steady_rate(placed: list[Any], latencies: list[float]) -> float:
    """Orders/s completed between the 10th and the 90th percentile completion."""
    finished = sorted(p.posted_at + lat for p, lat in zip(placed, latencies, strict=True))
    lo, hi = int(0.1 * len(finished)), int(0.9 * len(finished))
    return float((hi - lo) / (finished[hi] - finished[lo]))


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        name: ordered[min(len(ordered) - 1, int(q * len(ordered)))]
        for name, q in (("p50", 0.50), ("p95", 0.95), ("p99", 0.99), ("max", 1.0))
    }


def run(
    stack: Stack,
    out: Path,
    *,
    orders: int = 300,
    reps: int = 3,
    rates: tuple[float, ...] = (10.0, 50.0),
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

    throughput: list[float] = []
    fixed: dict[float, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="outboxkit-bench-saga-") as workdir:
        saga = Saga(stack, Path(workdir), echo=lambda line: None)
        total = orders * reps + sum(int(r * duration) for r in rates) + 1
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
                    throughput.append(steady_rate(placed, settle(placed).latencies))
                for n, rate in enumerate(rates):
                    count = int(rate * duration)
                    progress.update(f"saga: {count} orders at {rate:g}/s")
                    began = time.monotonic()
                    placed = saga.place_orders(
                        count, seed=200 + n, concurrency=32, retry_share=0.0, rate=rate
                    )
                    achieved = count / (time.monotonic() - began)
                    latencies = settle(placed).latencies
                    fixed[rate] = {
                        "orders": count,
                        "achieved_rate": achieved,
                        **percentiles(latencies),
                        "latencies_seconds": latencies,
                    }
            finally:
                saga.stop()
    found = machine(stack.database_url())
    saturation = spread(throughput)["median"]
    md = (
        "### Saga: order -> pay -> ship on the local stack\n\n"
        f"Saturation: {orders} orders POSTed by 8 clients as fast as the orders service answers, "
        f"{reps} repetitions; steady-state orders/s = 80% of the orders / (90th percentile "
        "completion - 10th percentile completion). Fixed rates: orders POSTed open-loop for "
        f"{duration:g} s; latency = POST to the order's final state (SHIPPED or CANCELLED: three "
        f"hops through Debezium, Kafka and Spark, trigger {trigger} s). Every run's invariants "
        "held (every order final, no effect applied twice).\n"
        + describe(found)
        + "\n"
        + markdown_table(
            ["measure", "min", "median", "max"],
            [["orders/s completed at saturation", *spread_cells(throughput, ",.1f")]],
        )
        + "\n"
        + markdown_table(
            ["offered rate", "achieved", "orders", "p50 s", "p95 s", "p99 s", "max s", "note"],
            [
                [
                    f"{rate:g}/s",
                    f"{f['achieved_rate']:.1f}/s",
                    f["orders"],
                    *(f"{f[k]:.2f}" for k in ("p50", "p95", "p99", "max")),
                    "above saturation: queueing" if rate > saturation else "below saturation",
                ]
                for rate, f in fixed.items()
            ],
        )
    )
    plots = [
        histogram_plot(
            out / f"saga-latency-{rate:g}.png",
            f"POST -> final state, {f['orders']:,} orders offered at {rate:g}/s",
            f["latencies_seconds"],
            xlabel="seconds",
            marks={k: f[k] for k in ("p50", "p95", "p99")},
        )
        for rate, f in fixed.items()
    ]
    plots.append(
        bar_plot(
            out / "saga-throughput.png",
            "Saga orders/s completed at saturation (steady state)",
            {"orders/s": throughput},
            ylabel="orders/s",
        )
    )
    data = {
        "scenario": "saga",
        "params": {
            "orders": orders,
            "reps": reps,
            "rates": list(rates),
            "duration": duration,
            "trigger_seconds": trigger,
        },
        "machine": found,
        "orders_per_second_at_saturation": spread(throughput) | {"samples": throughput},
        "fixed_rates": {f"{rate:g}": f for rate, f in fixed.items()},
        "plots": [str(p) for p in plots],
    }
    images = "".join(f"\n![saga latency at {r:g}/s](saga-latency-{r:g}.png)\n" for r in fixed)
    return data, md + images
