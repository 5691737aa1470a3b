"""The fault campaign's plan and figures (pure): which fault kinds a stack's shape offers, the
schedule of rounds, the figures per kind."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from outboxkit_workshop.bench.report import markdown_table
from outboxkit_workshop.commands.chaos import _chaos_markdown
from outboxkit_workshop.devstack.settings import StackSettings
from outboxkit_workshop.saga import common
from outboxkit_workshop.saga_harness.chaos import Campaign, Round, schedule
from outboxkit_workshop.saga_harness.faults import (
    NAMES,
    NETWORK_KINDS,
    SERVICES,
    FaultKindError,
    Shape,
    check,
    help_lines,
    offered,
    pick,
)

ONE_NODE = Shape()
CLUSTER = Shape(postgres=1, brokers=3, connect_workers=2, spark_workers=2, replicas=2)
# The kinds of every campaign before clusters, in their order: a seed plans the same rounds.
SINGLE_NODE_KINDS = (
    "spark-kill",
    "connect-kill",
    "orders-kill",
    "payments-kill",
    "shipping-kill",
    "postgres-crash",
    "broker-restart",
    "connect-task-restart",
)
CLUSTER_ONLY = (
    "kafka-leader-kill",
    "kafka-coordinator-kill",
    "kafka-controller-kill",
    "connect-worker-kill",
    "spark-worker-kill",
    "spark-executor-kill",
)


def test_one_node_offers_the_kinds_it_always_had_in_their_order():
    assert offered(ONE_NODE) == SINGLE_NODE_KINDS


def test_the_cluster_shape_offers_every_cluster_kind_and_the_common_ones():
    kinds = offered(CLUSTER)
    assert set(CLUSTER_ONLY) <= set(kinds)
    assert "connect-kill" not in kinds  # a group's worker: connect-worker-kill
    network = {kind.name for kind in NETWORK_KINDS}
    assert set(kinds) == set(NAMES) - {"connect-kill"} - network
    assert Shape.of(StackSettings(cluster=True)) == CLUSTER
    assert Shape.of(StackSettings()) == ONE_NODE


def test_the_partitionable_cluster_offers_every_network_kind_besides_the_others():
    shape = Shape.of(StackSettings(cluster=True, network="namespaces"))
    assert shape.partitionable
    kinds = offered(shape)
    assert {kind.name for kind in NETWORK_KINDS} <= set(kinds)
    assert kinds[: len(offered(CLUSTER))] == offered(CLUSTER)  # a seed plans the same rounds
    # On one node of each engine, the kinds that need several nodes are not offered.
    one = set(offered(Shape(partitionable=True)))
    assert {"commit-in-doubt", "service-postgres-cut", "consumer-kafka-slow"} <= one
    assert not {"leader-isolated", "controller-isolated", "connect-workers-split"} & one


def test_a_network_kind_on_loopback_says_how_to_get_the_partitionable_network():
    with pytest.raises(FaultKindError, match="OUTBOXKIT_NETWORK=namespaces"):
        check(["commit-in-doubt"], CLUSTER)


@pytest.mark.parametrize(
    ("shape", "present", "absent"),
    [
        (Shape(brokers=3), {"kafka-leader-kill", "kafka-controller-kill"}, {"spark-worker-kill"}),
        (Shape(connect_workers=2), {"connect-worker-kill"}, {"connect-kill", "kafka-leader-kill"}),
        (Shape(spark_workers=1), {"spark-worker-kill", "spark-executor-kill"}, set()),
        (
            Shape(postgres=0, brokers=0, connect_workers=0),
            {"spark-kill", "orders-kill"},
            {"postgres-crash", "broker-restart", "connect-kill"},
        ),
    ],
)
def test_each_engine_s_nodes_bring_their_kinds(shape, present, absent):
    kinds = set(offered(shape))
    assert present <= kinds
    assert not absent & kinds


def test_a_kind_the_shape_cannot_strike_is_refused_with_what_it_needs():
    assert check(["kafka-leader-kill", "orders-kill"], CLUSTER) == (
        "kafka-leader-kill",
        "orders-kill",
    )
    with pytest.raises(
        FaultKindError,
        match=r"kafka-leader-kill needs 3\+ Kafka nodes.*"
        r"1 Kafka node",
    ):
        check(["kafka-leader-kill"], ONE_NODE)
    with pytest.raises(FaultKindError, match="connect-kill needs one Connect worker"):
        check(["connect-kill"], CLUSTER)
    with pytest.raises(FaultKindError, match="unknown fault kind"):
        check(["kafka-kill"], CLUSTER)


def test_the_help_lists_every_kind_on_one_line():
    lines = help_lines().splitlines()
    assert [line.split()[0] for line in lines] == list(NAMES)
    assert SERVICES == common.SERVICES


def test_one_replica_is_struck_without_drawing_so_one_node_campaigns_stay_the_same():
    rng = random.Random(3)
    state = rng.getstate()
    assert pick(["orders"], rng) == "orders"
    assert rng.getstate() == state
    assert pick(["orders", "orders-2"], rng) in ("orders", "orders-2")
    assert rng.getstate() != state


def test_a_cluster_schedule_strikes_every_kind_once_per_cycle():
    kinds = offered(CLUSTER)
    plan = schedule(len(kinds), random.Random(5), kinds)
    assert sorted(plan) == sorted(kinds)
    assert Counter(schedule(3 * len(kinds), random.Random(5), kinds)) == dict.fromkeys(kinds, 3)


def test_every_kind_comes_once_per_cycle_in_a_seeded_shuffled_order():
    kinds = SINGLE_NODE_KINDS
    plan = schedule(50, random.Random(1), kinds)
    assert len(plan) == 50
    counts = Counter(plan)
    assert set(counts) == set(kinds)
    assert max(counts.values()) - min(counts.values()) <= 1
    for start in range(0, 50 - len(kinds) + 1, len(kinds)):
        assert sorted(plan[start : start + len(kinds)]) == sorted(kinds)
    assert plan == schedule(50, random.Random(1), kinds)
    assert plan != schedule(50, random.Random(2), kinds)


def campaign(recoveries: dict[str, list[float]], **overrides) -> Campaign:
    rounds = [
        Round(n, kind, float(n), 1.0, time, f"o{n}", f"node-{n}")
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
    none = {"orders_during": 0, "during_p99": 0.0}  # no POST times recorded
    assert c.by_fault() == {
        "postgres-crash": {"rounds": 1, "recovery_p50": 9.0, "recovery_max": 9.0, **none},
        "spark-kill": {"rounds": 3, "recovery_p50": 25.0, "recovery_max": 30.0, **none},
    }
    assert c.latency(0.5) == 50.5
    assert 99 <= c.latency(0.99) <= 100
    assert c.ok


def test_the_report_says_which_node_each_round_struck():
    text = _chaos_markdown(campaign({"kafka-leader-kill": [4.0, 6.0]}), markdown_table)
    header = next(line for line in text.splitlines() if "recovery (s)" in line and "round" in line)
    assert "struck" in header
    assert "node-1" in text and "node-2" in text


def test_anything_lost_doubled_stuck_or_inconsistent_fails_the_campaign():
    for broken in (
        {"lost": 1},
        {"duplicates": 1},
        {"stuck": 2},
        {"report_ok": False},
        {"kafka_duplicates": 1},
        # The read_committed scan could not read to the end (a transaction left open).
        {"problems": ["read_committed scan: did not reach the end of [('t', 1)]"]},
    ):
        assert not campaign({"spark-kill": [1.0]}, **broken).ok


def test_the_orders_posted_while_a_fault_lasted_are_its_own():
    rounds = [
        Round(1, "spark-executor-freeze", 10.0, 0.1, 8.0, "o1", "w", began=1000.0, ended=1040.0),
        Round(2, "postgres-crash", 60.0, 2.0, 9.0, "o2", "pg", began=1060.0, ended=1070.0),
        Round(3, "spark-executor-freeze", 90.0, 0.1, 7.0, "o3", "w", began=1100.0, ended=1140.0),
    ]
    # An order a second from 990 to 1149: its latency is 30 s during a freeze, 20 s during the
    # crash, 1 s otherwise.
    posted = [990.0 + n for n in range(160)]

    def latency(at: float) -> float:
        if any(r.began <= at <= r.ended for r in rounds if r.fault == "spark-executor-freeze"):
            return 30.0
        return 20.0 if 1060 <= at <= 1070 else 1.0

    c = campaign({}, rounds=rounds, latencies=[latency(at) for at in posted], posted=posted)
    found = c.by_fault()
    assert found["spark-executor-freeze"]["orders_during"] == 82  # 41 + 41, the ends included
    assert found["spark-executor-freeze"]["during_p99"] == 30.0
    assert found["postgres-crash"]["orders_during"] == 11
    assert found["postgres-crash"]["during_p99"] == 20.0
