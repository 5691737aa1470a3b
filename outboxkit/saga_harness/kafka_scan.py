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

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

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
    record's ``id`` header. A ``read_committed`` reader's end is the last stable offset: a
    transaction still open holds back what it wrote and everything after it. The read goes on
    until each partition is read to its high watermark, so a transaction left open past
    ``timeout`` fails the scan (naming its partitions) instead of ending it early."""
    consumer = Consumer(
        {
            **config,
            "group.id": f"outboxkit-scan-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    # The high watermarks, past any open transaction: read uncommitted.
    ends = Consumer(
        {
            **config,
            "group.id": f"outboxkit-scan-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_uncommitted",  # librdkafka's default is read_committed
        }
    )
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
                tail, pending = True, short_of_the_end(consumer, ends, assigned)
                continue
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"read_committed scan did not reach the end of {sorted(pending)}"
                    + (": a transaction open on them holds back their last records" if tail else "")
                )
            message = consumer.poll(1.0)
            if message is None:
                if tail:
                    pending = short_of_the_end(consumer, ends, assigned)
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
        ends.close()
    return Scan(
        records=sum(sum(c.values()) for c in counts.values()),
        duplicates={
            topic: sorted(i for i, n in c.items() if n > 1) for topic, c in counts.items() if c
        },
    )


def short_of_the_end(
    consumer: Consumer, ends: Consumer, partitions: Sequence[TopicPartition]
) -> set[Key]:
    """The partitions whose read position is short of their high watermark: records held back
    by an open transaction, or written since the reader's end of partition. ``ends``: a
    read_uncommitted client (the reader's own watermarks stop at the last stable offset)."""
    short: set[Key] = set()
    for tp in partitions:
        here = TopicPartition(tp.topic, tp.partition)
        low, high = ends.get_watermark_offsets(here, timeout=10, cached=False)
        position = consumer.position([here])[0].offset
        # Nothing read yet (an invalid position) is short only of a partition holding records.
        if (position < 0 and high > low) or 0 <= position < high:
            short.add((tp.topic, tp.partition))
    return short
