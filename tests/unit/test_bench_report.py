"""Pure helpers of the benchmark reports."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from outboxkit.bench.profile import group_of
from outboxkit.bench.report import markdown_table, percentile, ratio, spread
from outboxkit.bench.saga import percentiles, steady_rate


def test_spread_and_ratio_formatting() -> None:
    assert spread([3.0, 1.0, 2.0]) == {"min": 1.0, "median": 2.0, "max": 3.0}
    assert ratio(0.5) == "0.50"
    assert ratio(0.0123) == "0.012"  # small ratios keep a significant digit


def test_markdown_table() -> None:
    assert markdown_table(["a", "b"], [[1, "x"]]) == "| a | b |\n|---|---|\n| 1 | x |\n"


@dataclass
class Placed:
    posted_at: float


def test_steady_rate_ignores_fill_and_drain() -> None:
    # 100 orders finishing one per 0.1 s after a 20 s fill: 10 orders/s whatever the fill.
    placed = [Placed(0.0) for _ in range(100)]
    latencies = [20.0 + 0.1 * i for i in range(100)]
    assert steady_rate(placed, latencies) == pytest.approx(10.0)


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
    assert group_of("/x/outbox/record.py", "decode").startswith("decoding")
    assert group_of("/x/inbox/decision.py", "decide").startswith("inbox")
    assert group_of("/x/elsewhere.py", "f") == "other Python"
