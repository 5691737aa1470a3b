"""A consumer job on the stack's Spark standalone cluster: its tasks run in executor processes
under the workers (not in the driver), and kill -9 of an executor, then of a worker with its
executors, while it applies a backlog leaves every event applied once (the lost attempts'
transactions roll back; the retried tasks skip what committed by the inbox watermark). One
backlog and one driver for both faults: each run of either costs a 12,000-event backlog and a
driver's start on the cluster."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from outboxkit_workshop.devstack import spark
from outboxkit_workshop.devstack.network import address_of
from outboxkit_workshop.devstack.processes import process_tree
from outboxkit_workshop.devstack.stack import Stack
from outboxkit_workshop.devstack.state import Node
from tests.faults.test_spark_faults import ROOT, consume_command
from tests.spark_helpers import effect_stats, publish, wait_on_kafka

# Each fault lands while a backlog of thousands of events is left (a quarter, then half applied).
EVENTS = 12_000


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``."""
    return process_tree(pid)[1:]


def runs_python_tasks(pid: int) -> bool:
    """True when a PySpark worker daemon runs below ``pid`` (Python tasks ran there)."""
    for child in descendants(pid):
        try:
            argv = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"pyspark.daemon" in argv or b"pyspark.worker" in argv:
            return True
    return False


def workers(cluster: Stack) -> list[Node]:
    return [n for n in cluster.state.spark.nodes if n.name.startswith("spark-worker")]


@pytest.fixture
def backlog(cluster, cluster_engine, aggregate_type, cluster_effects_table) -> str:
    publish(cluster_engine, aggregate_type, EVENTS, per_tx=2000)
    wait_on_kafka(cluster, aggregate_type, EVENTS)
    return aggregate_type


class Driver:
    """`outboxkit consume` of the effects job, submitted to the cluster's master."""

    def __init__(self, cluster: Stack, aggregate_type: str, tmp_path: Path) -> None:
        self.consumer = f"sc-{time.time_ns() % 10**8:x}"
        command, env = consume_command(
            cluster, self.consumer, aggregate_type, tmp_path / "checkpoint"
        )
        master = cluster.spark_master()
        assert master and master.startswith("spark://")
        env |= {"OUTBOXKIT_SPARK_MASTER": master, "OUTBOXKIT_TEST_MAX_OFFSETS": "1000"}
        self.log = tmp_path / "driver.log"
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                command, env=env, cwd=ROOT, start_new_session=True, stdout=out, stderr=out
            )

    def wait_applied(self, engine, count: int, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while effect_stats(engine, self.consumer)[0] < count:
            assert self.process.poll() is None, self.tail()
            assert time.monotonic() < deadline, f"no progress to {count}:\n{self.tail()}"
            time.sleep(0.1)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


def applied_once(cluster, engine, driver: Driver) -> None:
    driver.wait_applied(engine, EVENTS)
    time.sleep(3)  # a late duplicate would show by now
    assert effect_stats(engine, driver.consumer) == (EVENTS, EVENTS)
    assert driver.process.poll() is None  # the driver rode the fault out


# tests/integration/test_spark_cluster.py shows the placement in every run on a standalone
# cluster of two workers; this is the same on the whole cluster shape, in the full run.
@pytest.mark.slow
def test_tasks_run_in_executors_under_the_workers(cluster, cluster_engine, backlog, tmp_path):
    driver = Driver(cluster, backlog, tmp_path)
    try:
        driver.wait_applied(cluster_engine, EVENTS // 4)
        node = cluster.state.spark.nodes[0]
        address = address_of(cluster.state.network, node.name)
        master = spark.master_state(node.extra_port or 0, address=address)
        assert master is not None and master.alive
        assert len(master.alive_workers()) == 2
        for worker in workers(cluster):
            assert worker.pid
            executors = spark.executors_of(worker.pid)
            assert executors, f"no executor under {worker.name}"
            assert any(runs_python_tasks(e.pid) for e in executors), worker.name
        assert not runs_python_tasks(driver.process.pid)  # no task ran in the driver
        applied_once(cluster, cluster_engine, driver)
    finally:
        driver.stop()


# The partition campaign strikes both kinds on the saga too, among the network faults
# (test_partitions.py); both are in the full run only.
@pytest.mark.slow
def test_an_executor_kill_then_a_worker_kill_apply_each_event_once(
    cluster, cluster_engine, backlog, tmp_path
):
    """Two faults in one run of the backlog: kill -9 of an executor (its worker starts a new
    one), then of a worker with its executors (started again, it registers with the master);
    every event applied once, and the driver rides both out."""
    driver = Driver(cluster, backlog, tmp_path)
    try:
        driver.wait_applied(cluster_engine, EVENTS // 4)
        worker = random.choice(workers(cluster))
        assert worker.pid
        executor = spark.executors_of(worker.pid)[0]
        os.kill(executor.pid, signal.SIGKILL)
        print(f"killed executor {executor.executor_id} (pid {executor.pid}) on {worker.name}")
        deadline = time.monotonic() + 120
        while not [e for e in spark.executors_of(worker.pid) if e.pid != executor.pid]:
            assert time.monotonic() < deadline, "the worker started no new executor"
            time.sleep(0.5)
        driver.wait_applied(cluster_engine, EVENTS // 2)
        worker = random.choice(workers(cluster))
        assert worker.pid
        executors = spark.executors_of(worker.pid)
        for pid in [worker.pid, *(e.pid for e in executors)]:
            os.kill(pid, signal.SIGKILL)
        print(f"killed {worker.name} (pid {worker.pid}) and executors {executors}")
        time.sleep(3)
        cluster.up()  # the worker starts again and registers with the master
        applied_once(cluster, cluster_engine, driver)
        assert all(n["health"] == "up" for n in cluster.status()["nodes"])
    finally:
        driver.stop()


pytestmark = [pytest.mark.cluster, pytest.mark.spark]
