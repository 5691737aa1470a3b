"""Pure helpers of the benchmark reports."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

from outboxkit_workshop.bench import figures
from outboxkit_workshop.bench.profile import group_of
from outboxkit_workshop.bench.report import markdown_table, percentile, ratio, spread
from outboxkit_workshop.bench.saga import _cpu_rows, percentiles, process_ticks, step_verdict


def test_spread_and_ratio_formatting() -> None:
    assert spread([3.0, 1.0, 2.0]) == {"min": 1.0, "median": 2.0, "max": 3.0}
    assert ratio(0.5) == "0.50"
    assert ratio(0.0123) == "0.012"  # small ratios keep a significant digit


def test_markdown_table() -> None:
    assert markdown_table(["a", "b"], [[1, "x"]]) == "| a | b |\n|---|---|\n| 1 | x |\n"


@dataclass
class Placed:
    posted_at: float


def steady(rate: float, seconds: float, latency: float) -> tuple[list[Placed], list[float]]:
    placed = [Placed(1000.0 + i / rate) for i in range(int(rate * seconds))]
    return placed, [latency] * len(placed)


def test_a_step_is_held_when_the_rate_is_kept_and_latency_stays_flat() -> None:
    placed, latencies = steady(50, 60, 1.2)
    verdict = step_verdict(50, 60, placed, latencies)
    assert verdict["held"] and verdict["completed_in_time"] == 1.0
    assert verdict["posted_rate"] == pytest.approx(50, rel=0.02)


def test_a_step_is_not_held_when_latency_grows_or_posts_fall_behind() -> None:
    placed, _ = steady(50, 60, 0)
    growing = [1.0 + 0.2 * i / 50 for i in range(len(placed))]  # queueing: +0.2 s per second
    verdict = step_verdict(50, 60, placed, growing)
    assert not verdict["held"] and verdict["p99_second_half"] > verdict["p99_first_half"]
    slow_posts = [Placed(1000.0 + i / 40) for i in range(3000)]  # 40/s offered as 50/s
    assert not step_verdict(50, 60, slow_posts, [1.0] * 3000)["held"]


def test_a_step_held_counts_toward_the_capacity_target_only_with_its_p99_within_5_s() -> None:
    placed, latencies = steady(50, 60, 4.0)
    assert step_verdict(50, 60, placed, latencies)["within_target"]
    slow = [4.0] * (len(placed) - 60) + [6.0] * 60  # 2% above 5 s, evenly through the step
    slow = [slow[(i * 37) % len(slow)] for i in range(len(slow))]
    verdict = step_verdict(50, 60, placed, slow)
    assert verdict["held"] and verdict["p99"] == 6.0 and not verdict["within_target"]


def test_percentiles() -> None:
    p = percentiles([float(i) for i in range(1, 101)])
    assert (p["p50"], p["p95"], p["p99"], p["max"]) == (51.0, 96.0, 100.0, 100.0)


def test_percentile_by_rank() -> None:
    assert percentile([3.0, 1.0, 2.0], 0.0) == 1.0
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert percentile([3.0, 1.0, 2.0], 1.0) == 3.0  # q = 1 is the largest, not past the end
    assert math.isnan(percentile([], 0.5))


def test_profile_groups() -> None:
    assert group_of("/x/psycopg/cursor.py", "execute").startswith("psycopg")
    assert group_of("/x/sqlalchemy/orm/session.py", "execute").startswith("SQLAlchemy")
    assert group_of("/x/kernel/wire/record.py", "decode").startswith("decoding")
    assert group_of("/x/inbox/decision.py", "decide").startswith("inbox")
    assert group_of("/x/elsewhere.py", "f") == "other Python"


def test_cpu_per_order_rows_put_the_busiest_process_first_and_add_up() -> None:
    runs = {
        10.0: [
            {"cpu_ms_per_order": {"orders": 4.0, "Postgres": 1.0, "load generator": 0.5}},
            {"cpu_ms_per_order": {"orders": 6.0, "Postgres": 3.0, "load generator": 0.5}},
        ],
        50.0: [{"cpu_ms_per_order": {"orders": 3.0, "Postgres": 3.5, "load generator": 0.2}}],
    }
    assert _cpu_rows(runs) == [
        ["Postgres", "2.0", "3.5"],  # ordered by the highest rate's figures
        ["orders", "5.0", "3.0"],  # medians over the runs of a rate
        ["load generator", "0.5", "0.2"],
        ["all", "7.5", "6.7"],
    ]


def test_process_ticks_reads_each_process_with_its_children() -> None:
    nodes = SimpleNamespace(nodes=[SimpleNamespace(pid=os.getpid())])
    none = SimpleNamespace(nodes=[])
    state = SimpleNamespace(postgres=nodes, broker=none, connect=none)
    saga = SimpleNamespace(pids={"orders": os.getpid()}, stack=SimpleNamespace(state=state))
    before = process_ticks(saga)  # type: ignore[arg-type]
    sum(i * i for i in range(3_000_000))  # some CPU in this process
    after = process_ticks(saga)  # type: ignore[arg-type]
    assert set(after) == {"orders", "Postgres", "load generator"}
    assert after["orders"] > before["orders"] and after["load generator"] > before["load generator"]


def test_the_saga_figures_say_what_the_warm_up_was_and_that_it_is_not_counted() -> None:
    published = Path(__file__).resolve().parents[2] / "docs" / "benchmarks" / "saga.json"
    data = json.loads(published.read_text())
    data.pop("warm_up", None)
    assert "not counted" not in figures.saga(data)
    data["warm_up"] = {"seconds": 30.0, "p50": 1.2, "p95": 2.0, "p99": 2.5, "max": 2.6}
    assert (
        "2 repetitions (ranges are over the repetitions) after 30 s at the first rate, not "
        "counted (its p50 / p99: 1.20 / 2.50 s), consumers' trigger"
    ) in " ".join(figures.saga(data).split())
