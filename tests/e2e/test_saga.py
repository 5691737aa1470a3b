"""The order -> pay -> ship saga end to end on the real stack, with and without faults."""

from __future__ import annotations

import os
import random
import signal
import threading
import time

import pytest

from saga import rules
from saga.run import Saga


def assert_consistent(saga: Saga, placed, warm=None) -> None:
    report = saga.report(placed, warm=warm)
    print(
        f"final states {report.by_status}; duplicates {report.duplicates}; "
        f"p50 {report.percentile(0.5):.1f}s p99 {report.percentile(0.99):.1f}s"
    )
    assert {k: v for k, v in report.violations.items() if v} == {}
    assert {k: v for k, v in report.duplicates.items() if v} == {}
    assert report.retried_same_order == report.retried_total > 0
    assert report.ok


def wait_all_final(saga: Saga, placed, timeout: float = 600) -> None:
    pending = saga.wait_final(placed, timeout=timeout)
    assert not pending, f"{len(pending)}/{len(placed)} orders not final:\n{saga.logs_tail()}"


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
