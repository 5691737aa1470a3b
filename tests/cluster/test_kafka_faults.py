"""kill -9 of the Kafka node that a cluster's exactly-once path leans on, while outbox events
stream: the leader of an outbox partition, the transaction coordinator of the Connect task's
producer, the active controller. With RF 3 and min ISR 2 an acknowledged record is on two
nodes, so a read_committed consumer must see every event: none lost, and none twice but for
what Debezium may repeat when its task resumes (`tests.streaming.RESUME_RESENDS`)."""

from __future__ import annotations

import random
import time

import pytest

from cdc.config import topic_for
from outboxkit_workshop.devstack import faults
from outboxkit_workshop.devstack.processes import stop
from outboxkit_workshop.devstack.stack import Stack
from tests.streaming import CLUSTER_EVENTS as EVENTS
from tests.streaming import check_counts, stream_with_faults


def _kill_and_restart(stack: Stack, choose, label: str):
    """A fault: kill -9 of the node ``choose()`` names, started again a few seconds later."""

    def fault(written: int) -> None:
        node = choose()
        faults.kill(node)
        print(f"killed {label} {node.name} (pid {node.pid}) at {written} events written")
        time.sleep(3)
        stack.up()  # starts the node again on its ports and data

    return fault


def test_rolling_restart_of_a_node_loses_nothing(cluster, cluster_engine, aggregate_type):
    """One node stopped (SIGTERM: a controlled shutdown moves its leaderships first) and started
    again on its data, as one step of a rolling restart."""

    def restart_one(written: int) -> None:
        node = random.choice(cluster.state.broker.nodes)
        assert stop(node.pid)
        print(f"stopped {node.name} (pid {node.pid}) at {written} events written")
        time.sleep(3)
        cluster.up()

    counts = stream_with_faults(
        cluster, cluster_engine, aggregate_type, events=EVENTS, points=[0.4], fault=restart_one
    )
    check_counts(counts, EVENTS)


def test_cluster_has_three_replicas_of_every_topic(cluster, cluster_engine, aggregate_type):
    """The outbox topic and every internal topic: RF 3, 2 in sync at least; unclean election
    off (the nodes' config)."""
    stream_with_faults(
        cluster, cluster_engine, aggregate_type, events=20, points=[], fault=lambda _: None
    )
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(cluster.kafka_client_config())
    topics = admin.list_topics(timeout=10).topics
    outbox_topic = topic_for(aggregate_type, topic_prefix=cluster.settings.topic_prefix)
    internal = [t for t in topics if t.startswith("_")]
    assert "__transaction_state" in internal and "__consumer_offsets" in internal
    assert sum(t.endswith(("-configs", "-offsets", "-status")) for t in internal) == 3
    for name in [outbox_topic, *internal]:
        for part in topics[name].partitions.values():
            assert len(part.replicas) == 3, (name, part.id, part.replicas)
    report = cluster.status()
    assert [n["name"] for n in report["nodes"] if n["engine"] == "broker"] == [
        "kafka-1",
        "kafka-2",
        "kafka-3",
    ]
    assert all(n["health"] == "up" for n in report["nodes"])
    text = (cluster.dir / "kafka" / "node-1" / "server.properties").read_text()
    assert "min.insync.replicas=2" in text and "unclean.leader.election.enable=false" in text


def test_partition_leader_kill_loses_nothing(cluster, cluster_engine, aggregate_type):
    topic = topic_for(aggregate_type, topic_prefix=cluster.settings.topic_prefix)
    partition = random.randrange(4)
    fault = _kill_and_restart(
        cluster, lambda: faults.partition_leader(cluster, topic, partition), f"leader of {topic}"
    )
    counts = stream_with_faults(
        cluster, cluster_engine, aggregate_type, events=EVENTS, points=[0.4], fault=fault
    )
    check_counts(counts, EVENTS)


def test_transaction_coordinator_kill_loses_nothing(cluster, cluster_engine, aggregate_type):
    connector = cluster.settings.connector_name
    fault = _kill_and_restart(
        cluster,
        lambda: faults.connect_task_coordinator(cluster, connector),
        "the transaction coordinator",
    )
    counts = stream_with_faults(
        cluster, cluster_engine, aggregate_type, events=EVENTS, points=[0.4], fault=fault
    )
    check_counts(counts, EVENTS)


def test_active_controller_kill_loses_nothing(cluster, cluster_engine, aggregate_type):
    before = faults.active_controller(cluster)
    fault = _kill_and_restart(
        cluster, lambda: faults.active_controller(cluster), "the active controller"
    )
    counts = stream_with_faults(
        cluster, cluster_engine, aggregate_type, events=EVENTS, points=[0.4], fault=fault
    )
    check_counts(counts, EVENTS)
    deadline = time.monotonic() + 30
    while faults.active_controller(cluster).name == before.name and time.monotonic() < deadline:
        time.sleep(0.5)
    assert faults.active_controller(cluster).name != before.name  # the quorum elected another


pytestmark = pytest.mark.cluster
