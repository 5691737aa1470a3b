"""The order -> pay -> ship saga end to end on the real stack, with and without faults."""

from __future__ import annotations

import os
import random
import signal
import threading
import time

import pytest
from confluent_kafka import Consumer, TopicPartition
from sqlalchemy import select

from cdc.config import topic_for
from devstack.stack import Stack
from inbox.tables import watermarks
from outboxkit.bench.report import percentile
from saga import rules
from saga.processes import Saga


def assert_consistent(saga: Saga, placed, warm=None) -> None:
    report = saga.report(placed, warm=warm)
    print(
        f"final states {report.by_status}; duplicates {report.duplicates}; "
        f"p50 {percentile(report.latencies, 0.5):.1f}s "
        f"p99 {percentile(report.latencies, 0.99):.1f}s"
    )
    assert {k: v for k, v in report.violations.items() if v} == {}
    assert {k: v for k, v in report.duplicates.items() if v} == {}
    assert report.retried_same_order == report.retried_total > 0
    assert report.ok


def wait_all_final(saga: Saga, placed, timeout: float = 600) -> None:
    pending = saga.wait_final(placed, timeout=timeout)
    assert not pending, f"{len(pending)}/{len(placed)} orders not final:\n{saga.logs_tail()}"


def records_in(bootstrap: str, topic: str) -> int:
    """How many offsets ``topic`` holds across its partitions (0 when it does not exist)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "outboxkit-e2e-count"})
    try:
        meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None:
            return 0
        total = 0
        for partition in meta.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            total += high - low
        return total
    finally:
        consumer.close()


# First in the module: it runs before the session saga starts, so the two sagas (two Spark
# drivers) do not compete for the machine.
def test_saga_follows_the_stack_topic_prefix(alo_saga: Saga, at_least_once_stack: Stack) -> None:
    """On a stack whose connectors route events to ``alo.event.<aggregate>`` (on a Connect
    worker without exactly-once source), the saga creates, consumes and completes through
    those topics, and every invariant holds."""
    prefix = at_least_once_stack.settings.topic_prefix
    assert prefix == "alo.event."
    placed = alo_saga.place_orders(20, seed=5, retry_share=0.3)
    wait_all_final(alo_saga, placed, timeout=300)
    assert_consistent(alo_saga, placed)

    consumed: set[str] = set()
    for engine in alo_saga.engines.values():
        with engine.connect() as conn:
            consumed |= set(conn.execute(select(watermarks.c.topic).distinct()).scalars())
    print(f"topics the consumers applied: {sorted(consumed)}")
    order, payment, shipment = (
        topic_for(t, topic_prefix=prefix) for t in (rules.ORDER, rules.PAYMENT, rules.SHIPMENT)
    )
    assert {order, payment} <= consumed <= {order, payment, shipment}
    bootstrap = at_least_once_stack.bootstrap_servers()
    # 20 orders and the warm-up order, at least once each (at-least-once Connect may repeat).
    assert records_in(bootstrap, order) >= 21
    assert records_in(bootstrap, payment) > 0


def test_300_orders_reach_a_final_state_consistently(saga):
    placed = saga.place_orders(300, seed=11)
    wait_all_final(saga, placed)
    report = saga.report(placed)
    # The mix exercises every path: declines, stock-outs with refunds, shipments.
    assert report.by_status.get(rules.SHIPPED, 0) > 0
    assert report.by_status.get(rules.CANCELLED, 0) > 0
    assert_consistent(saga, placed)


def kill_during(saga: Saga, stack, seed: int) -> None:
    """While orders are placed and processed: kill -9 the Spark driver and the Connect worker
    at random moments, restart each."""
    rng = random.Random(seed)
    time.sleep(rng.uniform(2, 8))
    saga.kill_consumers()
    print("[fault] killed the Spark driver")
    time.sleep(rng.uniform(0.5, 3))
    os.kill(stack.state.connect.pid, signal.SIGKILL)
    print("[fault] killed Connect")
    saga.start_consumers()
    stack.up()


@pytest.mark.parametrize(
    "seed",
    [
        pytest.param(1, id="round-1"),
        *[pytest.param(s, id=f"round-{s}", marks=pytest.mark.slow) for s in (2, 3)],
    ],
)
def test_killing_spark_and_connect_mid_run_keeps_every_invariant(saga, stack, seed):
    killer = threading.Thread(target=kill_during, args=(saga, stack, seed))
    killer.start()
    placed = saga.place_orders(200, seed=100 + seed)
    killer.join(timeout=300)
    wait_all_final(saga, placed)
    assert_consistent(saga, placed)
