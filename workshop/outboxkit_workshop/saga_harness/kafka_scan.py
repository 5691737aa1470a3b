"""What a ``read_committed`` reader sees on the saga's topics: every record from the start to
the end, and the event ids it sees more than once. With exactly-once source connectors
(KIP-618) a connector's crash, a broker's loss or a partition may re-send records, but never
past a transaction's commit: a committed duplicate is a relay bug, whatever the inbox skips."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from outboxkit_workshop.devstack.transactions import offsets

ID_HEADER = "id"
Key = tuple[str, int]  # a partition: its topic and number


@dataclass(frozen=True)
class Scan:
    """Records read (with an event id) and the ids read more than once, by topic."""

    records: int
    duplicates: dict[str, list[str]]

    @property
    def duplicate_count(self) -> int:
        return sum(len(ids) for ids in self.duplicates.values())


def scan(
    config: Mapping[str, str | int | float | bool], topics: Sequence[str], timeout: float = 120
) -> Scan:
    """Read every partition of ``topics`` from its beginning to its end, counting each
    record's ``id`` header, until each partition is read to its high watermark. A
    ``read_committed`` reader stops at the last stable offset: a transaction still open holds
    back what it wrote and everything after it, so one left open past ``timeout`` fails the
    scan with a TimeoutError naming its partitions."""
    consumer = Consumer(
        {
            **config,
            "group.id": f"outboxkit-scan-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    admin = AdminClient(dict(config))  # the ends, asked read uncommitted
    counts: dict[str, Counter[str]] = {topic: Counter() for topic in topics}
    try:
        metadata = consumer.list_topics(timeout=10).topics
        missing = [t for t in topics if t not in metadata or metadata[t].error is not None]
        if missing:
            raise RuntimeError(f"read_committed scan: no topic {missing} on the cluster")
        assigned = [
            TopicPartition(topic, partition, OFFSET_BEGINNING)
            for topic in topics
            for partition in metadata[topic].partitions
        ]
        consumer.assign(assigned)
        pending = {(tp.topic, tp.partition) for tp in assigned}
        deadline = time.monotonic() + timeout
        # First every partition's end of partition; then, until none is short of its high
        # watermark, the tail (checked again each time the reader is idle).
        tail = False
        while pending or not tail:
            if not pending:
                tail, pending = True, short_of_the_end(consumer, admin, assigned)
                continue
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"read_committed scan did not reach the end of {sorted(pending)}"
                    + (": a transaction open on them holds back their last records" if tail else "")
                    # (or records still being written: the scan reads a saga at rest)
                )
            message = consumer.poll(1.0)
            if message is None:
                if tail:
                    pending = short_of_the_end(consumer, admin, assigned)
                continue
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    pending.discard((message.topic(), message.partition()))
                    continue
                if error.fatal():
                    raise RuntimeError(f"read_committed scan: {error}")
                continue  # a broker moving, a leader changing: the client retries
            headers = dict(message.headers() or [])
            event_id = headers.get(ID_HEADER)
            topic = message.topic()
            if event_id is not None and topic is not None:
                text = event_id if isinstance(event_id, str) else event_id.decode(errors="replace")
                counts[topic][text] += 1
    finally:
        consumer.close()
    return Scan(
        records=sum(sum(c.values()) for c in counts.values()),
        duplicates={
            topic: sorted(i for i, n in c.items() if n > 1) for topic, c in counts.items() if c
        },
    )


def short_of_the_end(
    consumer: Consumer, admin: AdminClient, partitions: Sequence[TopicPartition]
) -> set[Key]:
    """The partitions whose read position is short of their high watermark: records held back
    by an open transaction, or written since the reader's end of partition. All of them when
    a leader does not answer now (asked again when the reader is next idle)."""
    keys = {(tp.topic, tp.partition) for tp in partitions}
    try:
        low = offsets(admin, partitions, latest=False)
        high = offsets(admin, partitions)
    except KafkaException:
        return keys
    read = consumer.position([TopicPartition(t, p) for t, p in sorted(keys)])
    position = {(tp.topic, tp.partition): tp.offset for tp in read}
    return {key for key in keys if short(position[key], low[key], high[key])}


def short(position: int, low: int, high: int) -> bool:
    """Whether a reader at ``position`` (negative: nothing read yet) has records left to read
    in a partition holding offsets ``low`` to ``high`` (exclusive)."""
    return high > low and position < high
