"""Open and hanging Kafka transactions on the real broker: seen, left alone while their
coordinator still counts them, and aborted with Kafka's own tool."""

from __future__ import annotations

import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from outboxkit_workshop.devstack import artifacts, transactions
from outboxkit_workshop.devstack.stack import Stack
from outboxkit_workshop.devstack.transactions import Hanging, TransactionTool


def committed_values(bootstrap: str, topic: str) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"it-hanging-{uuid.uuid4().hex[:6]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    values = []
    try:
        while (message := consumer.poll(3)) is not None:
            if message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    return values


def test_an_open_transaction_is_seen_not_called_hanging_and_aborted_by_the_tool(stack: Stack):
    bootstrap = stack.bootstrap_servers()
    topic = f"it-txn-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result()
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"it-hanging-{uuid.uuid4().hex[:6]}",
            "transaction.timeout.ms": 900_000,  # its coordinator would wait 15 min
        }
    )
    producer.init_transactions()
    producer.begin_transaction()
    producer.produce(topic, b"committed")
    producer.commit_transaction()
    producer.begin_transaction()
    producer.produce(topic, b"left open")
    producer.flush()

    held = transactions.open_transactions(bootstrap)
    assert (topic, 0) in held  # read_committed readers stop where the open transaction starts
    start = held[(topic, 0)]
    assert start == 2  # after the committed record (0) and its commit marker (1)
    assert committed_values(bootstrap, topic) == [b"committed"]

    found = artifacts.locate(stack.settings.cache_dir, install=False)
    tool = TransactionTool(found.java, found.broker_libs, bootstrap)
    # Its coordinator counts it as ongoing: never reported, whatever its age.
    assert [h for h in tool.find_hanging(older_than_minutes=0) if h.topic == topic] == []

    tool.abort(Hanging(topic, 0, producer_id=-1, producer_epoch=-1, start_offset=start))
    assert (topic, 0) not in transactions.open_transactions(bootstrap)
    assert committed_values(bootstrap, topic) == [b"committed"]  # the aborted one is never read
