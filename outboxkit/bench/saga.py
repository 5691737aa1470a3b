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

import itertools
import tempfile
import time
from pathlib import Path
from typing import Any

from devstack.stack import Stack
from outboxkit.bench.report import (
    Progress,
    bar_plot,
    describe,
    histogram_plot,
    machine,
    markdown_table,
    percentile,
    spread,
    spread_cells,
)
from saga.invariants import Report
from saga.load import Placed
from saga.processes import Saga


def steady_rate(placed: list[Any], latencies: list[float]) -> float:
    """Orders/s completed between the 10th and the 90th percentile completion."""
    finished = sorted(p.posted_at + lat for p, lat in zip(placed, latencies, strict=True))
    lo, hi = int(0.1 * len(finished)), int(0.9 * len(finished))
    return float((hi - lo) / (finished[hi] - finished[lo]))


HOPS = (
    "1: OrderPlaced -> payments applies it",
    "2: PaymentCaptured -> shipping applies it",
    "3: ShipmentScheduled -> orders applies it",
)


def hop_seconds(saga: Any, order_ids: list[str]) -> dict[str, list[float]]:
    """Per hop, seconds between the transaction that published an event and the one that applied
    it, for SHIPPED orders: orders.created_at -> payments.created_at -> shipments.created_at ->
    orders.final_at (each hop: Debezium, Kafka, a Spark micro-batch, the inbox transaction)."""
    from sqlalchemy import select

    from saga import orders, payments, rules, shipping

    def times(service: str, table: Any, column: str, *where: Any) -> dict[str, Any]:
        with saga.engines[service].connect() as conn:
            key = table.c.order_id if "order_id" in table.c else table.c.id
            rows = conn.execute(select(key, table.c[column]).where(key.in_(order_ids), *where))
            return {r[0]: r[1] for r in rows}

    placed = times("orders", orders.orders, "created_at", orders.orders.c.status == rules.SHIPPED)
    final = times("orders", orders.orders, "final_at", orders.orders.c.status == rules.SHIPPED)
    paid = times("payments", payments.payments, "created_at")
    shipped = times("shipping", shipping.shipments, "created_at")
    hops: dict[str, list[float]] = {hop: [] for hop in HOPS}
    for order_id in placed:
        chain = [placed[order_id], paid.get(order_id), shipped.get(order_id), final[order_id]]
        if None in chain:
            continue
        for hop, (a, b) in zip(HOPS, itertools.pairwise(chain), strict=True):
            hops[hop].append((b - a).total_seconds())
    return hops


def percentiles(samples: list[float]) -> dict[str, float]:
    return {
        name: percentile(samples, q)
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
                    shown = 0

                    def show(final: int) -> None:
                        nonlocal shown
                        progress.advance(final - shown)
                        shown = final

                    saga.wait_final(placed, timeout=900, progress=show)
                    report = saga.report(placed)
                    if not report.ok:
                        raise RuntimeError(
                            f"saga invariants failed: {report.by_status}, duplicates "
                            f"{report.duplicates}, violations {report.violations}"
                        )
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
                    hops = hop_seconds(saga, [p.order_id for p in placed])
                    fixed[rate] = {
                        "hops_p50": {h: percentiles(v)["p50"] for h, v in hops.items() if v},
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
    md += (
        "\nWhere an order's time goes: median seconds per hop of SHIPPED orders, from the "
        "transaction that published the event to the one that applied it (Debezium, Kafka, a "
        "Spark micro-batch, the inbox transaction).\n\n"
        + markdown_table(
            ["hop", *(f"p50 at {rate:g}/s" for rate in fixed)],
            [
                [hop, *(f"{f['hops_p50'].get(hop, float('nan')):.2f}" for f in fixed.values())]
                for hop in HOPS
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
