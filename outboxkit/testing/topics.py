"""The harness's Kafka, in memory (no I/O): the records the connector would write, per topic
partition, and what each consumer has read of them.

A captured outbox row becomes the record `outboxkit.kernel.wire.record.encode` builds, what
the connector writes: topic ``<topic prefix><aggregate type>``, key the aggregate id, value the
payload's jsonb text, headers ``id``, ``eventType``, ``aggregateType``, ``traceparent``,
``headers``, ``schemaVersion``, and the source headers the connector copies (``sourceName``,
and ``sourcePosition`` from the capture's sequence, which grows in commit order as Debezium's
does). Its partition is a stable hash of the key (CRC-32) over the topic's partitions, its
offset the next one of that partition."""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from outboxkit.kernel.wire import SOURCE, SOURCE_POSITION
from outboxkit.kernel.wire.record import KafkaRecord, encode, read
from outboxkit.testing.capture import Captured

SOURCE_NAME = "outboxkit-harness"  # the connector's logical name, as the records carry it
DEFAULT_PARTITIONS = 3

TopicPartition = tuple[str, int]


def partition_of(key: bytes | None, partitions: int) -> int:
    """The partition of a record with ``key``: a stable hash of it, the same in every run.

    Args:
        key: The record's key (None: partition 0).
        partitions: The topic's partition count.
    """
    return 0 if key is None else zlib.crc32(key) % partitions


@dataclass(frozen=True)
class Match:
    """Which records a hold or a fault applies to: every field given must match.

    Attributes:
        topic: The record's topic.
        event_type: Its ``eventType`` header.
        key: Its key (the aggregate id).
        event_id: Its ``id`` header (the event id).
        consumer: The consumer (job) it is delivered to; None: every one.
    """

    topic: str | None = None
    event_type: str | None = None
    key: str | None = None
    event_id: str | None = None
    consumer: str | None = None

    def matches(self, record: KafkaRecord, consumer: str | None = None) -> bool:
        """True when ``record``, delivered to ``consumer``, is one of these.

        Args:
            record: A record as a consumer reads it.
            consumer: The consumer it goes to; None: any.
        """
        if self.topic is not None and record.topic != self.topic:
            return False
        if self.consumer is not None and consumer is not None and consumer != self.consumer:
            return False
        decoded = read(record)
        return (
            (self.event_type is None or decoded.event_type == self.event_type)
            and (self.key is None or decoded.key == self.key)
            and (self.event_id is None or decoded.event_id == self.event_id)
        )


@dataclass
class TopicLog:
    """Every record written, per topic partition, in offset order.

    Attributes:
        partitions: Partitions per topic.
        topic_prefix: The connector's topic prefix, before the aggregate type.
    """

    partitions: int = DEFAULT_PARTITIONS
    topic_prefix: str = "outbox.event."
    _records: dict[TopicPartition, list[KafkaRecord]] = field(default_factory=dict)

    def write(self, captured: Captured) -> KafkaRecord:
        """Write the record the connector writes for ``captured``, at its partition's end."""
        envelope = captured.envelope
        topic = self.topic_prefix + envelope.aggregate_type
        partition = partition_of(envelope.aggregate_id.encode(), self.partitions)
        record = encode(
            envelope,
            topic_prefix=self.topic_prefix,
            partition=partition,
            offset=self.end(topic, partition),
            timestamp_ms=captured.committed_ms,
        )
        position = f'["{captured.seq}","{captured.seq}"]'.encode()
        headers = [*record.headers, (SOURCE, SOURCE_NAME.encode()), (SOURCE_POSITION, position)]
        return self._append(topic, partition, record._replace(headers=headers))

    def resend(self, record: KafkaRecord) -> KafkaRecord:
        """Write ``record`` again at its partition's end, as a connector re-sends an event after
        a restart: same key, value and headers (its source position too), a new offset."""
        again = record._replace(offset=self.end(record.topic, record.partition))
        return self._append(record.topic, record.partition, again)

    def end(self, topic: str, partition: int) -> int:
        """The next offset of the partition."""
        return len(self._records.get((topic, partition), ()))

    def records(self, topic: str, partition: int, start: int = 0) -> Sequence[KafkaRecord]:
        """The partition's records from offset ``start``."""
        return self._records.get((topic, partition), [])[start:]

    def topic_partitions(self, topics: Sequence[str]) -> list[TopicPartition]:
        """The partitions of ``topics`` that hold records, in order."""
        return sorted(tp for tp in self._records if tp[0] in topics)

    def all(self) -> Iterator[KafkaRecord]:
        """Every record, by topic, partition and offset."""
        for tp in sorted(self._records):
            yield from self._records[tp]

    def _append(self, topic: str, partition: int, record: KafkaRecord) -> KafkaRecord:
        self._records.setdefault((topic, partition), []).append(record)
        return record


def deliverable(
    records: Sequence[KafkaRecord], consumer: str, holds: Sequence[Match]
) -> Sequence[KafkaRecord]:
    """The records a consumer may read now: those before the first held one (a held record
    holds the rest of its partition, as a partition is read in order)."""
    for n, record in enumerate(records):
        if any(hold.matches(record, consumer) for hold in holds):
            return records[:n]
    return records
