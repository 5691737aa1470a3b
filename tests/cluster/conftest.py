"""The cluster shape of the embedded stack (3 Kafka nodes with RF 3 and min ISR 2, 2 Connect
workers in one group, a Spark standalone master with 2 one-core workers), started once for the
tests of this folder and stopped after them; on the partitionable network when the machine
allows it (root), else on loopback."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import create_engine
from sqlalchemy.engine import Engine

from cdc.supervisor import RestartPolicy, Supervisor
from outboxkit.devstack.network import unavailable
from outboxkit.devstack.stack import Stack
from tests.conftest import temporary_stack


@pytest.fixture(scope="package")
def cluster() -> Iterator[Stack]:
    with (
        temporary_stack(
            "outboxkit-cluster-",
            "cluster",
            connector_name=f"cl-{uuid.uuid4().hex[:6]}",
            kafka_brokers=3,
            connect_workers=2,
            spark_workers=2,
            # Each node in a network namespace of its own where this machine allows (root):
            # the network faults of test_partitions.py cut and slow its links.
            network="loopback" if unavailable() else "namespaces",
        ) as stack,
        supervised(stack),
    ):
        yield stack


@contextmanager
def supervised(stack: Stack) -> Iterator[None]:
    """The connector supervisor beside the cluster, as a deployment runs it (`outboxkit cdc
    supervise`): a task failed by a node's loss mid-commit is restarted. It asks whichever
    Connect worker runs, as a load balancer in front of the workers would."""
    supervisor = Supervisor(
        stack.connect_client(), RestartPolicy(first_delay=5.0), echo=lambda s: print(f"[sup] {s}")
    )
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(2.0):
            try:
                url = stack.connect_url()
                if not url:  # `stack up` is starting the workers again
                    continue
                supervisor.client = stack.connect_client(url)
                supervisor.check([stack.settings.connector_name])
            except Exception as exc:  # a worker or the state file mid-change: next pass
                print(f"[sup] {exc!r}")

    thread = threading.Thread(target=run, name="connector-supervisor", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=10)


@pytest.fixture(scope="package")
def cluster_engine(cluster: Stack) -> Iterator[Engine]:
    engine = create_engine(cluster.database_url(), pool_size=4)
    yield engine
    engine.dispose()


@pytest.fixture(scope="package")
def cluster_effects_table(cluster_engine: Engine) -> None:
    from tests.jobs import metadata

    metadata.create_all(cluster_engine)
