"""The cluster scenario's report: each shape's figures, their ratios to the first shape (the
baseline), and what each shape cost and how loaded the machine was while it was measured."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from outboxkit_workshop.bench.cdc import BATCH, DRAIN, PER_EVENT
from outboxkit_workshop.bench.report import bar_plot, describe, markdown_table, ratio

PIPELINE = {DRAIN: "Debezium drain", PER_EVENT: "pipeline, per-event", BATCH: "pipeline, batch"}
SAGA = {"achieved_rate": "saga orders/s", "p50": "saga p50 s", "p99": "saga p99 s"}


def figures(result: Mapping[str, Any]) -> dict[str, float]:
    """One shape's headline figures: pipeline medians (events/s) and saga figures, NaN for
    what was not measured."""
    rates = result["pipeline"]["events_per_second"]
    found = {column: float(rates[key]["median"]) for key, column in PIPELINE.items()}
    saga = result.get("saga") or {}
    found |= {column: float(saga.get(key, math.nan)) for key, column in SAGA.items()}
    return found


def ratios(results: Sequence[Mapping[str, Any]]) -> list[dict[str, float]]:
    """Each shape's figures divided by the first shape's (NaN where either is missing)."""
    base = figures(results[0])
    return [
        {k: v / base[k] if base[k] and not math.isnan(base[k]) else math.nan for k, v in f.items()}
        for f in map(figures, results)
    ]


def plural(n: int, noun: str) -> str:
    """``n`` and ``noun``, with an s unless ``n`` is 1."""
    return f"{n} {noun}{'s' if n != 1 else ''}"


def _cell(value: float, fmt: str) -> str:
    return "-" if math.isnan(value) else format(value, fmt)


def _spread(result: Mapping[str, Any], key: str) -> str:
    s = result["pipeline"]["events_per_second"][key]
    return f"{s['median']:,.0f} ({s['min']:,.0f}-{s['max']:,.0f})"


def _load(load: Mapping[str, Any] | None) -> str:
    if not load:
        return "-"
    before, after = load["loadavg_before"][0], load["loadavg_after"][0]
    busy, own = (100 * load[k] for k in ("cpu_busy_share", "cpu_share_of_this_run"))
    return f"{before:.1f} -> {after:.1f}; {busy:.0f}% busy, {busy - own:.0f}% others"


def tables(results: Sequence[Mapping[str, Any]]) -> str:
    """The three markdown tables: figures, ratios to the baseline, cost and load."""
    figure_rows = []
    for r in results:
        f = figures(r)
        figure_rows.append(
            [
                r["label"],
                *(_spread(r, key) for key in PIPELINE),
                _cell(f[SAGA["achieved_rate"]], ".1f"),
                _cell(f[SAGA["p50"]], ".2f"),
                _cell(f[SAGA["p99"]], ".2f"),
            ]
        )
    ratio_rows = [
        [r["label"], *("-" if math.isnan(v) else ratio(v) for v in q.values())]
        for r, q in zip(results, ratios(results), strict=True)
    ]
    cost_rows = [
        [
            r["label"],
            f"{r['stack_up_seconds']:.0f}",
            r["stack_processes"],
            f"{r['stack_rss_mib']:,.0f}",
            _load(r["load"].get("pipeline")),
            _load(r["load"].get("saga")),
        ]
        for r in results
    ]
    return (
        markdown_table(
            ["shape", *(f"{c} events/s" for c in PIPELINE.values()), *SAGA.values()], figure_rows
        )
        + "\nRatios to the first shape (medians; for p50/p99 below 1 is better):\n\n"
        + markdown_table(["shape", *PIPELINE.values(), *SAGA.values()], ratio_rows)
        + "\nWhat each shape cost (its stack's start, processes and their memory: postmaster, "
        "Kafka nodes, Connect worker, Spark master and workers), and the machine's load while it "
        "was measured: 1-minute load average before -> after; share of both CPUs busy, and the "
        "part of it taken by processes other than this run's:\n\n"
        + markdown_table(
            [
                "shape",
                "stack up s",
                "stack processes",
                "their RSS MiB",
                "load during pipeline",
                "load during saga",
            ],
            cost_rows,
        )
    )


def report(
    out: Path, results: Sequence[Mapping[str, Any]], params: Mapping[str, Any]
) -> tuple[dict[str, Any], str]:
    """The scenario's JSON data and markdown, and its plot written into ``out``."""
    found = results[0]["machine"]
    first = results[0]["pipeline"]["params"]
    md = (
        "### Cluster: what scale-out costs and buys on this machine\n\n"
        "Each shape in a stack of its own, started, measured and stopped in turn (Postgres and one "
        "Kafka Connect worker in all; 3 Kafka nodes mean replication factor 3 and "
        "min.insync.replicas 2 on every topic). Pipeline: as `bench pipeline`, a backlog of "
        f"{params['events']:,} events committed while the connector was paused, drained by "
        "Debezium alone and through Kafka and the Spark inbox sink (per-event and batch handler), "
        f"{plural(params['reps'], 'repetition')}, median (min-max); "
        f"trigger {first['trigger_seconds']} s; "
        "the driver runs in a process of its own and submits to the shape's Spark. Saga: as "
        f"`bench saga`, orders POSTed open-loop at {params['saga_rate']:g}/s for "
        f"{params['saga_duration']:g} s after a warm-up order, POST -> final state. Partitions: "
        "of every measured topic (the pipeline's and the saga's three)."
        + (
            " The last row is the baseline's pipeline measured again after the others: its "
            "ratio is how far the machine's load alone moved the figures during the run."
            if any(r["shape"].endswith("-again") for r in results)
            else ""
        )
        + "\n"
        + describe(found)
        + "\n"
        + tables(results)
    )
    series = {
        f"{r['shape']} / {column}": r["pipeline"]["events_per_second"][key]["samples"]
        for r in results
        for key, column in PIPELINE.items()
    }
    plot = bar_plot(
        out / "cluster.png",
        "Pipeline events/s per stack shape (k brokers, s Spark workers, p partitions)",
        series,
        ylabel="events/s",
        groups=[r["shape"] for r in results],
    )
    data = {
        "scenario": "cluster",
        "params": dict(params),
        "machine": found,
        "shapes": list(results),
        "ratios_to_baseline": [
            {k: None if math.isnan(v) else v for k, v in q.items()} for q in ratios(results)
        ],
        "plots": [str(plot)],
    }
    return data, md + "\n![cluster events/s](cluster.png)\n"
