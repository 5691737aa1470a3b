"""Network partitions on the exactly-once path from the outbox to Kafka, while outbox events
stream on the partitionable cluster: the leader of an outbox partition deaf to the other
brokers (one way), and the Connect worker running the connector's task cut from every broker
but not from Postgres. A read_committed consumer must see every event, and none twice but for
what Debezium may repeat when its task resumes (`tests.streaming.RESUME_RESENDS`). The saga
under every kind of partition, with the consumers' commit in doubt among them, is the campaign
of test_partitions.py (``--slow``). Needs root; skipped elsewhere."""

from __future__ import annotations

import random
import time

import pytest

from cdc.config import topic_for
from outboxkit.devstack import faults
from outboxkit.devstack.network import Network, unavailable
from outboxkit.devstack.stack import Stack
from outboxkit.saga_harness import partitions
from tests.cluster.test_kafka_faults import EVENTS, check_counts
from tests.streaming import stream_with_faults

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(unavailable() is not None, reason=str(unavailable())),
]

# Longer than the timeouts that decide: a broker is fenced after 6 s, a Connect worker after 10.
CUT_SECONDS = 12.0


def _held(stack: Stack, cut, label: str):
    """A fault: the rules ``cut`` applies held for CUT_SECONDS, then every link healed."""

    def fault(written: int) -> None:
        with partitions.applied(stack, cut) as network:
            print(f"{label} at {written} events written: {network.rules}")
            time.sleep(CUT_SECONDS)

    return fault


def _healed(stack: Stack) -> None:
    network = stack.network()
    assert network is not None and network.rules == []  # no link left cut


def test_a_leader_deaf_to_the_other_brokers_loses_nothing(cluster, cluster_engine, aggregate_type):
    topic = topic_for(aggregate_type, topic_prefix=cluster.settings.topic_prefix)
    partition = random.randrange(4)
    leader = faults.partition_leader(cluster, topic, partition).name
    others = [n for n in partitions.brokers(cluster) if n != leader]

    def deafen(network: Network) -> None:
        network.cut(others, [leader], oneway=True)

    fault = _held(cluster, deafen, f"{leader} (leads {topic}[{partition}]) deaf to {others}")
    counts = stream_with_faults(
        cluster, cluster_engine, aggregate_type, events=EVENTS, points=[0.3], fault=fault
    )
    check_counts(counts, EVENTS)
    _healed(cluster)


def test_the_task_worker_cut_from_kafka_loses_nothing(cluster, cluster_engine, aggregate_type):
    """Its task keeps reading the WAL but cannot commit its transactions; the group moves the
    task (or it resumes once healed) and the records it could not commit are sent again."""
    worker = faults.task_worker(cluster, cluster.settings.connector_name).name
    brokers = partitions.brokers(cluster)

    def cut(network: Network) -> None:
        network.cut([worker], brokers)

    fault = _held(cluster, cut, f"{worker} (runs the task) cut from {brokers}")
    counts = stream_with_faults(
        cluster, cluster_engine, aggregate_type, events=EVENTS, points=[0.3], fault=fault
    )
    check_counts(counts, EVENTS)
    _healed(cluster)
