"""The fault campaign's plan and figures (pure)."""

from __future__ import annotations

import random
from collections import Counter

from saga.chaos import KINDS, Campaign, Round, schedule


def test_every_kind_comes_once_per_cycle_in_a_seeded_shuffled_order():
    plan = schedule(50, random.Random(1))
    assert len(plan) == 50
    counts = Counter(plan)
    assert set(counts) == set(KINDS)
    assert max(counts.values()) - min(counts.values()) <= 1
    for start in range(0, 50 - len(KINDS) + 1, len(KINDS)):
        assert sorted(plan[start : start + len(KINDS)]) == sorted(KINDS)
    assert plan == schedule(50, random.Random(1))
    assert plan != schedule(50, random.Random(2))


def campaign(recoveries: dict[str, list[float]], **overrides) -> Campaign:
    rounds = [
        Round(n, kind, float(n), 1.0, time, f"o{n}")
        for n, (kind, time) in enumerate(
            ((k, t) for k, times in recoveries.items() for t in times), 1
        )
    ]
    fields = dict(
        rounds=rounds,
        orders=10,
        baseline=3.0,
        duration=60.0,
        by_status={"SHIPPED": 10},
        stuck=0,
        lost=0,
        duplicates=0,
        latencies=[float(n) for n in range(1, 101)],
        unavailable=0,
        report_ok=True,
        audits=[],
    )
    return Campaign(**{**fields, **overrides})


def test_recovery_per_fault_kind_and_latency_quantiles():
    c = campaign({"spark-kill": [20.0, 30.0, 25.0], "postgres-crash": [9.0]})
    assert c.by_fault() == {
        "postgres-crash": {"rounds": 1, "recovery_p50": 9.0, "recovery_max": 9.0},
        "spark-kill": {"rounds": 3, "recovery_p50": 25.0, "recovery_max": 30.0},
    }
    assert c.latency(0.5) == 50.5
    assert 99 <= c.latency(0.99) <= 100
    assert c.ok


def test_anything_lost_doubled_stuck_or_inconsistent_fails_the_campaign():
    for broken in ({"lost": 1}, {"duplicates": 1}, {"stuck": 2}, {"report_ok": False}):
        assert not campaign({"spark-kill": [1.0]}, **broken).ok
