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
from collections.abc import Callable

import pytest

from cdc.config import topic_for
from outboxkit_workshop.devstack import faults
from outboxkit_workshop.devstack.network import Network, unavailable
from outboxkit_workshop.devstack.stack import Stack
from outboxkit_workshop.saga_harness import partitions
from tests.streaming import CLUSTER_EVENTS as EVENTS
from tests.streaming import check_counts, stream_with_faults

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))

# Longer than the timeouts that decide: a broker is fenced after 6 s, a Connect worker after 10.
CUT_SECONDS = 12.0


Rules = Callable[[], tuple[str, Callable[[Network], None]]]


def _stream_through(stack: Stack, engine, aggregate_type: str, rules: Rules) -> None:
    """EVENTS outbox events streamed while ``rules()`` (looked up when it strikes, once events
    flow) names a cut and gives its rules, held for CUT_SECONDS and healed; then every event
    read once (Debezium's resume allowance aside) and no link left cut."""

    def fault(written: int) -> None:
        label, cut = rules()
        with partitions.applied(stack, cut) as network:
            print(f"{label} at {written} events written: {network.rules}")
            time.sleep(CUT_SECONDS)

    counts = stream_with_faults(
        stack, engine, aggregate_type, events=EVENTS, points=[0.3], fault=fault
    )
    check_counts(counts, EVENTS)
    network = stack.network()
    assert network is not None and network.rules == [] and network.shapers == {}


def test_a_leader_deaf_to_the_other_brokers_loses_nothing(cluster, cluster_engine, aggregate_type):
    topic = topic_for(aggregate_type, topic_prefix=cluster.settings.topic_prefix)

    def deaf_leader() -> tuple[str, Callable[[Network], None]]:
        partition = random.randrange(faults.partitions(cluster, topic))
        leader = faults.partition_leader(cluster, topic, partition).name
        others = [n for n in partitions.brokers(cluster) if n != leader]
        label = f"{leader} (leads {topic}[{partition}]) deaf to {others}"
        return label, lambda network: network.cut(others, [leader], oneway=True)

    _stream_through(cluster, cluster_engine, aggregate_type, deaf_leader)


def test_the_task_worker_cut_from_kafka_loses_nothing(cluster, cluster_engine, aggregate_type):
    """Its task keeps reading the WAL but cannot commit its transactions; the group moves the
    task (or it resumes once healed) and the records it could not commit are sent again."""

    def worker_cut() -> tuple[str, Callable[[Network], None]]:
        worker = faults.task_worker(cluster, cluster.settings.connector_name).name
        brokers = partitions.brokers(cluster)
        label = f"{worker} (runs the task) cut from {brokers}"
        return label, lambda network: network.cut([worker], brokers)

    _stream_through(cluster, cluster_engine, aggregate_type, worker_cut)
