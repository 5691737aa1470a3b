"""The cost benchmark's pure parts: reading a process tree's CPU, the totals (JIT and GC shares
not counted twice) and the published tables."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import pytest

from outboxkit_workshop.bench import cost, cost_figures
from outboxkit_workshop.devstack.processes import process_children, process_tree


def test_a_child_process_is_found_in_the_tree_and_its_cpu_counted() -> None:
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\nend = time.process_time() + 0.3\n"
            "while time.process_time() < end: pass\ntime.sleep(5)",
        ]
    )
    try:
        deadline = time.monotonic() + 10
        while cost._ticks(child.pid, reaped=False) < 0.2 * cost.HZ:
            assert time.monotonic() < deadline, "the child never burned its CPU"
            time.sleep(0.05)
        assert child.pid in process_tree(os.getpid(), process_children())
    finally:
        child.kill()
        child.wait()
    assert cost._ticks(os.getpid(), reaped=True) >= 0.2 * cost.HZ  # reaped: its CPU is ours


def test_used_ms_and_the_total_leave_jit_and_gc_shares_out() -> None:
    before = {"Kafka": 10.0, "Kafka JIT": 5.0, "Kafka GC": 1.0, "orders": 0.0}
    after = {
        "Kafka": 10.0 + cost.HZ,
        "Kafka JIT": 5.0 + cost.HZ / 2,
        "Kafka GC": 1.0,
        "orders": 0.0,
    }
    used = cost.used_ms(before, after)
    assert used == {"Kafka": 1000.0, "Kafka JIT": 500.0, "Kafka GC": 0.0, "orders": 0.0}
    assert cost_figures.total(used) == 1000.0


def _run(variant: str, rep: int, idle: float, ms: dict[float, float]) -> dict[str, Any]:
    return {
        "variant": variant,
        "rep": rep,
        "idle": {"seconds": 30, "percent": {"Kafka": idle, "Kafka JIT": 1.0, "orders": 0.5}},
        "rates": [
            {
                "rate": rate,
                "orders": int(rate * 20),
                "ms_per_order": {"Kafka": value, "Kafka JIT": value / 2, "orders": 1.0},
                "p50": 0.8 + rep / 10,
                "p99": 1.2 + rep / 10,
            }
            for rate, value in ms.items()
        ],
    }


def test_the_tables_show_each_variant_against_the_targets_and_each_component() -> None:
    data = {
        "params": {
            "reps": 2,
            "seconds": 20,
            "idle_seconds": 30,
            "warm_seconds": 45,
            "trigger_seconds": 0.25,
            "targets_ms_per_order": {"10": 30.0, "50": 12.0},
            "idle_target_percent": 5.0,
        },
        "machine": {"cpus": 2, "platform": "Linux-6.1-x86_64", "python": "3.11.7"},
        "runs": [
            _run("defaults", 0, 10.0, {10.0: 40.0, 50.0: 10.0}),
            _run("poll 200", 0, 4.0, {10.0: 20.0}),
            _run("defaults", 1, 12.0, {10.0: 60.0, 50.0: 14.0}),
            _run("poll 200", 1, 6.0, {10.0: 24.0}),
        ],
    }
    text = cost_figures.render(data)
    # Whole stack: Kafka + orders, the JIT share not added again; median (min-max) of the reps.
    assert "| defaults | idle | 11.5 (10.5-12.5)% of a core | <= 5% |  |  |" in text
    assert "| defaults | 10/s | 51.0 (41.0-61.0) ms/order | <= 30 ms | 0.85 (0.80-0.90) |" in text
    assert "| defaults | 50/s | 13.0 (11.0-15.0) ms/order | <= 12 ms |" in text
    assert "| poll 200 | 10/s | 23.0 (21.0-25.0) ms/order | <= 30 ms |" in text
    assert "poll 200 | 50/s" not in text  # a lever measured at 10/s only
    # Components, of the defaults: Kafka with its JIT share beneath it, and the sum.
    assert "| Kafka | 11.0 (10.0-12.0)% | 50.0 (40.0-60.0) | 12.0 (10.0-14.0) |" in text
    assert (
        "| &nbsp;&nbsp;of which JIT compiler threads | 1.0 (1.0-1.0)% | 25.0 (20.0-30.0) |" in text
    )
    assert "| **all** | 11.5 (10.5-12.5)% | 51.0 (41.0-61.0) | 13.0 (11.0-15.0) |" in text
    assert "Reproduce: `./dev.sh bench cost`." in text
    # A run of some levers only says which, so that the command reproduces it.
    data["params"] = {**data["params"], "levers": ["boundary", "hadoop-fs"]}
    assert "Reproduce: `./dev.sh bench cost --cost-levers boundary,hadoop-fs`." in (
        cost_figures.render(data)
    )


def test_the_levers_are_chosen_by_key_in_their_order() -> None:
    assert cost.variants() == (cost.DEFAULTS, *cost.LEVERS.values())
    chosen = cost.variants(["hadoop-fs", "boundary"])
    assert chosen == (cost.DEFAULTS, cost.LEVERS["boundary"], cost.LEVERS["hadoop-fs"])
    assert cost.LEVERS["hadoop-fs"].env == {"OUTBOXKIT_SPARK_FORKLESS_FS": "false"}
    with pytest.raises(ValueError, match=r"unknown cost levers \['fs'\]"):
        cost.variants(["fs"])


def test_the_command_line_knows_every_lever_and_refuses_others() -> None:
    import argparse

    from outboxkit_workshop.bench import cli

    assert tuple(cost.LEVERS) == cli.COST_LEVERS
    assert cli.cost_levers(" boundary, hadoop-fs ") == ["boundary", "hadoop-fs"]
    for wrong in ("", ",", "fs", "boundary,fs"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected keys among poll"):
            cli.cost_levers(wrong)
