"""Adding partitions to an outbox topic without breaking per-key order: the connector paused,
every consumer drained, the partitions added, the connector resumed.

More partitions move keys: a key's next events go to another partition, and would be applied
before its older events still waiting in the old one. With the connector paused (services keep
committing; their events wait in the WAL, the replication slot holds them) and every consumer
caught up with what was written before, no key has an event in flight when it moves."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cdc.connect import ConnectClient
from outboxkit.kernel.retry import wait_until


@dataclass(frozen=True)
class PartitionPlan:
    """What adding partitions to one topic does."""

    topic: str
    connector: str
    before: int
    after: int

    def describe(self) -> str:
        return (
            f"pause connector {self.connector}; wait until every consumer applied each of "
            f"{self.topic}'s {self.before} partitions up to its last record; add partitions "
            f"{self.before}..{self.after - 1}; resume {self.connector}"
        )


class PartitionsNotAdded(RuntimeError):
    """The partitions could not be added safely (the connector is resumed either way)."""


def plan(kafka: Mapping[str, Any], topic: str, partitions: int, connector: str) -> PartitionPlan:
    """The plan for ``topic`` to have ``partitions``; raises when it has as many or more."""
    from confluent_kafka.admin import AdminClient

    metadata = AdminClient(dict(kafka)).list_topics(topic, timeout=30)
    found = metadata.topics.get(topic)
    if found is None or found.error is not None:
        raise PartitionsNotAdded(f"topic {topic} does not exist")
    before = len(found.partitions)
    if partitions <= before:
        raise PartitionsNotAdded(
            f"{topic} has {before} partitions: Kafka can only add (ask for more than {before})"
        )
    return PartitionPlan(topic, connector, before, partitions)


def last_records(kafka: Mapping[str, Any], topic: str, partitions: int) -> dict[int, int]:
    """Per partition, the offset of its last committed record (-1 when none): what a consumer
    must have applied. A transaction's commit marker takes the offset after its last record,
    and an aborted transaction's records are not read, so the end offset alone does not say:
    the tail is read back, further each time it holds no committed record."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            **kafka,
            "group.id": "outboxkit-partitions",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        found: dict[int, int] = {}
        for p in range(partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            found[p], back = -1, 64
            while found[p] < 0 and high > low:
                start = max(low, high - back)
                found[p] = _last_committed(consumer, TopicPartition(topic, p, start), high)
                if start == low:
                    break
                back *= 16
        return found
    finally:
        consumer.close()


def _settled(kafka: Mapping[str, Any], topic: str, partitions: int, timeout: float = 60) -> None:
    """Wait until the topic's end offsets stop moving (the paused task's last transaction
    committed or aborted): two reads a second apart that agree."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**kafka, "group.id": "outboxkit-partitions"})
    try:

        def ends() -> list[int]:
            return [
                consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                for p in range(partitions)
            ]

        reads: list[list[int]] = []

        def agree() -> bool:
            reads.append(ends())
            return len(reads) > 1 and reads[-1] == reads[-2]

        wait_until(
            agree,
            timeout=timeout,
            poll=1.0,
            what=f"{topic}'s end offsets to stop moving after pausing",
            error=PartitionsNotAdded,
        )
    finally:
        consumer.close()


def _last_committed(consumer: Any, start: Any, end: int) -> int:
    """The offset of the last committed record from ``start`` up to ``end`` (-1: none)."""
    consumer.assign([start])
    last, deadline = -1, time.monotonic() + 60
    while time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            if consumer.position([start])[0].offset >= end:
                break
            continue
        offset = message.offset()
        if message.error() is None and offset is not None:
            last = int(offset)
    return last


def add_partitions(
    client: ConnectClient,
    kafka: Mapping[str, Any],
    chosen: PartitionPlan,
    applied: Callable[[], Mapping[int, int]],
    *,
    drained: Callable[[], Any] = lambda: None,
    timeout: float = 600.0,
    echo: Callable[[str], Any] = print,
) -> None:
    """Carry out ``chosen``. ``applied()``: the lowest watermark per partition over every
    consumer of the topic (-1 for one with nothing applied); ``drained()`` runs once they all
    caught up, before the partitions are added (the consumers' position floors:
    `inbox.moves.raise_floors`). The connector's task is restarted as it resumes, so its
    producer routes by the new partition count at once instead of at its next metadata
    refresh (``metadata.max.age.ms``, 5 minutes by default)."""
    from confluent_kafka.admin import AdminClient, NewPartitions  # type: ignore[attr-defined]

    client.pause(chosen.connector)
    echo(f"connector {chosen.connector} paused")
    try:
        _settled(kafka, chosen.topic, chosen.before)
        wanted = last_records(kafka, chosen.topic, chosen.before)

        def behind() -> dict[int, int]:
            marks = applied()
            return {p: o for p, o in wanted.items() if marks.get(p, -1) < o}

        wait_until(
            behind,
            until=lambda partitions: not partitions,
            timeout=timeout,
            what="every consumer to apply the records before the pause (nothing added)",
            error=PartitionsNotAdded,
        )
        echo(f"every consumer applied {chosen.topic} up to {wanted}")
        drained()
        admin = AdminClient(dict(kafka))
        future = admin.create_partitions([NewPartitions(chosen.topic, chosen.after)])
        future[chosen.topic].result(timeout=60)
        echo(f"{chosen.topic}: {chosen.before} -> {chosen.after} partitions")
    finally:
        client.restart(chosen.connector, include_tasks=True)  # paused, with a new producer
        client.resume(chosen.connector)
        echo(f"connector {chosen.connector} resumed")
