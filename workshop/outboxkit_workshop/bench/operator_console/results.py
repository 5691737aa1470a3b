"""What a run gives: the checks that the overview read what was seeded, the results (the JSON
`figures` renders the docs from) and their markdown."""

from __future__ import annotations

import statistics
from typing import Any

from outboxkit_workshop.bench.operator_console.measure import Measured, heads_of, quantiles
from outboxkit_workshop.bench.operator_console.seed import Setting
from outboxkit_workshop.bench.report import markdown_table


def results(
    params: dict[str, Any],
    found: dict[str, Any],
    setting: Setting,
    measured: Measured,
    checked: dict[str, Any],
    quiet: dict[str, Any],
) -> dict[str, Any]:
    """The run's results: its parameters, the machine (``found``), the seeding's seconds, each
    path's and part's quantiles, the statements and plans, the heads each read had, the idle
    console (``quiet``), the load and what the overview read (``checked``)."""
    heads = measured.heads[params["warm_up"] :]
    return {
        "scenario": "console",
        "params": params,
        "machine": found,
        "seed_seconds": setting.seconds,
        "ms": {name: quantiles(ms) for name, ms in measured.ms.items()},
        "overview_parts_ms": {name: quantiles(ms) for name, ms in measured.parts.items()},
        "statements": measured.statements.summary(),
        "explain": measured.plans,
        "heads_read": {
            "partitions_behind": setting.lagging,
            "per_read": heads,
            "min": min(heads),
            "median": statistics.median(heads),
        },
        "idle": quiet,
        "load": measured.load.as_dict(),
        "checks": checked,
        "plots": [],
    }


def checks(view: Any, setting: Setting, parked: int, partitions: int) -> dict[str, Any]:
    """What the last overview read showed, next to what was seeded: it must add up."""
    [consumer] = view.consumers
    heads = len(heads_of(consumer))
    found = {
        "partitions": len(consumer.partitions),
        "parked": consumer.parked,
        "retrying": consumer.retrying,
        "lag": consumer.lag,
        "heads_read": heads,
        "lagging_partitions": setting.lagging,
        "causes": setting.causes,
        "problems": [*view.problems, *([consumer.problem] if consumer.problem else [])],
    }
    expected = {"partitions": partitions, "parked": parked, "lag": setting.lag}
    wrong = {k: (found[k], v) for k, v in expected.items() if found[k] != v}
    if wrong or consumer.retrying != setting.retrying:
        raise RuntimeError(f"the overview read differs from what was seeded: {wrong}")
    return found


def summarise(data: dict[str, Any]) -> str:
    """The run's markdown: the figures with their targets, the overview's parts, the slow
    statements and their plans, the machine."""
    from outboxkit_workshop.bench.figures import console as tables

    slow = [s for s in data["statements"] if s["p50_ms"] >= data["params"]["slow_ms"]]
    parked = data["params"]["parked"]
    text_ = f"### Operator console: its pages over {parked:,} parked records, and idle\n\n"
    text_ += tables(data)
    if slow:
        text_ += "\nStatements at " + f"{data['params']['slow_ms']:g} ms or more (median):\n\n"
        text_ += markdown_table(
            ["path", "statement", "calls", "p50 ms", "max ms"],
            [
                [
                    s["path"],
                    f"`{s['sql'][:120]}`",
                    s["calls"],
                    f"{s['p50_ms']:.1f}",
                    f"{s['max_ms']:.1f}",
                ]
                for s in slow
            ],
        )
        for sql, plan in data["explain"].items():
            text_ += f"\n```\n{sql}\n\n{plan}\n```\n"
    return text_
