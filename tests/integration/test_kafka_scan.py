"""The read_committed scan the campaigns end with, on the real broker: it counts committed
records' event ids and the ids seen twice, never an aborted transaction's, and a transaction
left open fails it with the partitions it holds back."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from outboxkit_workshop.devstack.stack import Stack
from outboxkit_workshop.devstack.transactions import offsets
from outboxkit_workshop.saga_harness.kafka_scan import scan


def transactional(bootstrap: str) -> Producer:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"it-scan-{uuid.uuid4().hex[:8]}"}
    )
    producer.init_transactions(30)
    return producer


def send(producer: Producer, topic: str, partition: int, *ids: str) -> None:
    for event_id in ids:
        producer.produce(topic, b"{}", partition=partition, headers=[("id", event_id.encode())])


def test_the_scan_counts_committed_ids_and_fails_on_a_transaction_left_open(stack: Stack):
    bootstrap = stack.bootstrap_servers()
    topic = f"it-scan-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result()
    config = {"bootstrap.servers": bootstrap}
    producer = transactional(bootstrap)
    producer.begin_transaction()
    send(producer, topic, 0, "a", "b", "a")  # "a" twice: a duplicate the scan must name
    send(producer, topic, 1, "c")
    producer.commit_transaction(30)
    producer.begin_transaction()
    send(producer, topic, 1, "aborted")
    producer.flush(30)  # written, then aborted: its record and the abort marker in the log
    producer.abort_transaction(30)
    # "c" and its commit marker, "aborted" and its abort marker: the scan reads past both. The
    # coordinator writes the abort marker after abort_transaction returns: wait for it.
    deadline = time.monotonic() + 15
    while offsets(admin, [TopicPartition(topic, 1)]) != {(topic, 1): 4}:
        assert time.monotonic() < deadline, offsets(admin, [TopicPartition(topic, 1)])
        time.sleep(0.2)

    found = scan(config, [topic], timeout=30)
    assert found.records == 4  # the aborted transaction's record is not read
    assert found.duplicates == {topic: ["a"]}

    producer.begin_transaction()
    try:
        send(producer, topic, 1, "d")
        producer.flush(30)  # written, not committed: the last stable offset stays before it
        with pytest.raises(TimeoutError, match=rf"\('{topic}', 1\).*a transaction open"):
            scan(config, [topic], timeout=20)
    finally:
        producer.commit_transaction(30)
    assert scan(config, [topic], timeout=30).records == 5
