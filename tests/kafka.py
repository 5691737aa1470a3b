"""A small Kafka reader for the tests: read topics from the start until enough arrived."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from confluent_kafka import Consumer, KafkaException, TopicPartition

from outboxkit.kernel.wire.record import Headers, KafkaRecord


def _headers(raw: Iterable[tuple[str, str | bytes | None]] | None) -> Headers:
    """confluent-kafka headers as (name, bytes) pairs."""
    return [(k, v.encode() if isinstance(v, str) else v) for k, v in (raw or ())]


def wait_for_topic(consumer: Consumer, topic: str, timeout: float) -> list[int]:
    """Partitions of ``topic`` once it exists (Connect creates topics on first event)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        meta = consumer.list_topics(topic, timeout=5).topics.get(topic)
        if meta is not None and meta.error is None and meta.partitions:
            return sorted(meta.partitions)
        time.sleep(0.25)
    raise TimeoutError(f"topic {topic} did not appear within {timeout:.0f}s")


def read_records(
    bootstrap: str,
    topics: Iterable[str],
    *,
    until: Callable[[list[KafkaRecord]], bool],
    timeout: float,
    idle_after_done: float = 0.0,
) -> list[KafkaRecord]:
    """Read ``topics`` from offset 0 until ``until(records)`` holds, then on to the end of every
    partition as it is at that moment (a record written before the last one ``until`` needed,
    a duplicate included, is read), and ``idle_after_done`` seconds more if given; or raise
    TimeoutError with what was read. Reads committed records only (librdkafka's default
    isolation level, stated explicitly): a partition's end is its last stable offset, and the
    position moves past transaction markers, so an open transaction is not waited for."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "outboxkit-reader",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    records: list[KafkaRecord] = []
    try:
        deadline = time.monotonic() + timeout
        assignment = [
            TopicPartition(topic, p, 0)
            for topic in topics
            for p in wait_for_topic(consumer, topic, timeout)
        ]
        consumer.assign(assignment)
        ends: dict[tuple[str, int], int] | None = None
        done_at = 0.0
        while True:
            now = time.monotonic()
            if ends is None and until(records):
                ends = _end_offsets(consumer, assignment)
                done_at = now
            if ends is not None and now - done_at >= idle_after_done and _at(consumer, ends):
                return records
            if now > deadline:
                raise TimeoutError(f"read {len(records)} records in {timeout:.0f}s, wanted more")
            for message in consumer.consume(num_messages=5000, timeout=0.2):
                if message.error():
                    raise KafkaException(message.error())
                records.append(
                    KafkaRecord(
                        topic=message.topic() or "",
                        partition=message.partition() or 0,
                        offset=message.offset() or 0,
                        key=message.key(),
                        value=message.value(),
                        headers=_headers(message.headers()),  # type: ignore[arg-type]
                        timestamp_ms=message.timestamp()[1],
                    )
                )
    finally:
        consumer.close()


def _end_offsets(
    consumer: Consumer, assignment: list[TopicPartition]
) -> dict[tuple[str, int], int]:
    """Each assigned partition's end now (for a read_committed consumer: its last stable
    offset)."""
    return {
        (tp.topic, tp.partition): consumer.get_watermark_offsets(tp, timeout=10, cached=False)[1]
        for tp in assignment
    }


def _at(consumer: Consumer, ends: dict[tuple[str, int], int]) -> bool:
    """True once the consumer's position reached ``ends`` in every partition (an empty
    partition has no position but is at its end 0)."""
    positions = consumer.position([TopicPartition(t, p) for t, p in ends])
    return all(
        end <= 0 or tp.offset >= end for tp, end in zip(positions, ends.values(), strict=True)
    )
