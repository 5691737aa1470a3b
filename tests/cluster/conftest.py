"""The cluster shape of the embedded stack (3 Kafka nodes with RF 3 and min ISR 2, 2 Connect
workers in one group, a Spark standalone master with 2 one-core workers), started once for the
tests of this folder and stopped after them; on the partitionable network when the machine
allows it (root), else on loopback."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine
from sqlalchemy.engine import Engine

from outboxkit_workshop.devstack.network import unavailable
from outboxkit_workshop.devstack.stack import Stack
from outboxkit_workshop.devstack.supervision import supervised
from tests.conftest import temporary_stack


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The partition tests first in this folder, the campaign first of them: its saga starts
    on the fresh cluster, and the partitions strike a cluster with every replica in sync, not
    one the node-kill tests have just shaken (their broker restarts leave Connect's config
    topic unwritable for a while)."""
    places = [n for n, item in enumerate(items) if "/tests/cluster/" in item.path.as_posix()]
    block = [items[n] for n in places]
    partition_tests = ("test_partitions.py", "test_pipeline_partitions.py")
    first = sorted(
        (item for item in block if item.path.name in partition_tests),
        key=lambda item: partition_tests.index(item.path.name),
    )
    for n, item in zip(places, first + [i for i in block if i not in first], strict=True):
        items[n] = item


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
            # the network faults of test_partitions.py and test_pipeline_partitions.py cut and
            # slow its links.
            network="loopback" if unavailable() else "namespaces",
        ) as stack,
        supervised(stack, echo=print),
    ):
        yield stack


@pytest.fixture(scope="package")
def cluster_engine(cluster: Stack) -> Iterator[Engine]:
    engine = create_engine(cluster.database_url(), pool_size=4)
    yield engine
    engine.dispose()


@pytest.fixture(scope="package")
def cluster_effects_table(cluster_engine: Engine) -> None:
    from tests.jobs import metadata

    metadata.create_all(cluster_engine)
