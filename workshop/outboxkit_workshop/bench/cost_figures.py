"""The cost benchmark's tables (`outboxkit_workshop.bench.cost`): the whole stack's CPU per
order and at idle for each variant against the targets, then each component's share."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from outboxkit_workshop.bench.report import markdown_table

COMPONENT_ORDER = (
    "consumer driver (Spark JVM)",
    "consumer Python workers",
    "consumer driver (Python)",
    "Kafka",
    "Connect + Debezium",
    "Postgres",
    "orders",
    "payments",
    "shipping",
)
JVMS = ("consumer driver (Spark JVM)", "Kafka", "Connect + Debezium")


def _cell(samples: Sequence[float], fmt: str = ".1f") -> str:
    """``median (min-max)`` over the repetitions; the median alone when there is one."""
    med = statistics.median(samples)
    if len(samples) == 1:
        return f"{med:{fmt}}"
    return f"{med:{fmt}} ({min(samples):{fmt}}-{max(samples):{fmt}})"


def total(parts: Mapping[str, float]) -> float:
    """The whole stack's figure: the components, not their JIT / GC shares counted twice."""
    return sum(v for k, v in parts.items() if not k.endswith((" JIT", " GC")))


def _variants(data: Mapping[str, Any]) -> dict[str, list[Mapping[str, Any]]]:
    found: dict[str, list[Mapping[str, Any]]] = {}
    for run in data["runs"]:
        found.setdefault(run["variant"], []).append(run)
    return found


def _at(runs: Sequence[Mapping[str, Any]], rate: float) -> list[Mapping[str, Any]]:
    return [r for run in runs for r in run["rates"] if r["rate"] == rate]


def _headline(data: Mapping[str, Any]) -> str:
    variants = _variants(data)
    defaults = next(iter(variants.values()))
    rates = [r["rate"] for r in defaults[0]["rates"]]
    targets = {float(k): v for k, v in data["params"]["targets_ms_per_order"].items()}
    idle_target = data["params"]["idle_target_percent"]
    rows = []
    for name, runs in variants.items():
        idle = [total(run["idle"]["percent"]) for run in runs]
        rows.append([name, "idle", f"{_cell(idle)}% of a core", f"<= {idle_target:g}%", "", ""])
        for rate in rates:
            measured = _at(runs, rate)
            if not measured:
                continue
            ms = [total(r["ms_per_order"]) for r in measured]
            target = targets.get(rate)
            rows.append(
                [
                    name,
                    f"{rate:g}/s",
                    f"{_cell(ms)} ms/order",
                    f"<= {target:g} ms" if target else "",
                    _cell([r["p50"] for r in measured], ".2f"),
                    _cell([r["p99"] for r in measured], ".2f"),
                ]
            )
    return markdown_table(
        ["variant", "load", "whole stack CPU", "target", "POST -> final p50 s", "p99 s"], rows
    )


def _cells(runs: Sequence[Mapping[str, Any]], rates: Sequence[float], key: str) -> list[str]:
    """A component's idle share and CPU per order at each rate."""
    idle = [run["idle"]["percent"].get(key, 0.0) for run in runs]
    at = [_cell([r["ms_per_order"].get(key, 0.0) for r in _at(runs, rate)]) for rate in rates]
    return [f"{_cell(idle)}%", *at]


def _components(data: Mapping[str, Any]) -> str:
    runs = next(iter(_variants(data).values()))
    rates = [r["rate"] for r in runs[0]["rates"]]
    rows = []
    for name in COMPONENT_ORDER:
        rows.append([name, *_cells(runs, rates, name)])
        if name in JVMS:
            for part, what in ((" JIT", "JIT compiler threads"), (" GC", "GC threads")):
                rows.append([f"&nbsp;&nbsp;of which {what}", *_cells(runs, rates, name + part)])
    idle = [total(run["idle"]["percent"]) for run in runs]
    cells = [_cell([total(r["ms_per_order"]) for r in _at(runs, rate)]) for rate in rates]
    rows.append(["**all**", f"{_cell(idle)}%", *cells])
    return markdown_table(
        ["component", "idle, % of a core", *(f"ms/order at {rate:g}/s" for rate in rates)], rows
    )


def render(data: Mapping[str, Any]) -> str:
    p = data["params"]
    method = (
        f"The saga on the local stack (three services, their connectors, the three consumer "
        f"jobs in one Spark driver on `local[2]`, trigger {p['trigger_seconds']:g} s). Each "
        f"variant's consumers are started afresh and given {p['warm_seconds']:g} s of orders at "
        "50/s, not measured (the JVMs compile their hot code in their first minutes); then the "
        f"stack with no orders for {p['idle_seconds']:g} s, then orders POSTed open-loop at "
        f"each rate for {p['seconds']:g} s, CPU counted from the first POST until every order "
        f"is final and the saga's invariants hold. {p['reps']} repetitions, each taking every "
        "variant in turn: median (min-max). User + system CPU of every process of the stack, "
        "the load generator apart.\n\n"
    )
    components = (
        "\nWhere it goes with the defaults: each component's share of a core at idle and its "
        "CPU per order. The consumer driver's JVM runs Spark's driver and its executors "
        "(`local[2]`); JIT compiler and GC threads are each JVM's, counted in its row too.\n\n"
    )
    from outboxkit_workshop.bench.figures import machine

    reps = "" if p["reps"] == 2 else f" --reps {p['reps']}"
    if p.get("levers") is not None:
        reps += f" --cost-levers {','.join(p['levers'])}"
    return (
        method
        + _headline(data)
        + components
        + _components(data)
        + f"\nMachine: {machine(data['machine'])}. Reproduce: `./dev.sh bench cost{reps}`.\n"
    )
