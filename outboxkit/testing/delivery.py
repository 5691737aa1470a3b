"""Delivering the topic log to the consumers through their real inboxes: per consumer and
partition, the records it has not read yet in one slice (`inbox.Inbox.apply_partition`), as a
micro-batch hands a partition's records to one transaction."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from inbox.apply import Inbox
from inbox.slice import BatchResult
from outboxkit.kernel.wire.record import KafkaRecord
from outboxkit.testing.topics import Match, TopicLog, TopicPartition, deliverable
from spark_consumers.job import Job


@dataclass
class Consumer:
    """One job's inbox and how far it has read each partition (the next offset).

    Attributes:
        job: The job, as the harness runs it.
        inbox: Its inbox on the harness's database (`spark_consumers.Job.inbox`).
        positions: The next offset it reads, per topic partition.
    """

    job: Job
    inbox: Inbox
    positions: dict[TopicPartition, int] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The consumer's name (its inbox rows are kept under it)."""
        return self.job.consumer

    def reads(self, topic: str) -> bool:
        """True when the job reads ``topic``."""
        return topic in self.job.topics

    def has_read(self, record: KafkaRecord) -> bool:
        """True when ``record`` was delivered to it already."""
        return record.offset < self.positions.get((record.topic, record.partition), 0)


@dataclass(frozen=True)
class Delivery:
    """One slice handed to a consumer's inbox, and what the inbox did with it.

    Attributes:
        consumer: The consumer's name.
        records: The slice: records of one topic partition, in offset order.
        kind: ``read`` (the next records), ``replay`` (records read before, at their offsets)
            or ``lost`` (the slice never reached the inbox: read again later).
        result: What the inbox did (None when lost).
    """

    consumer: str
    records: tuple[KafkaRecord, ...]
    kind: str
    result: BatchResult | None


@dataclass
class Drop:
    """A fault: the next ``times`` slices holding a record of ``match`` are lost on the way."""

    match: Match
    times: int = 1

    def takes(self, records: Sequence[KafkaRecord], consumer: str) -> bool:
        """True (and one time less) when ``records`` are lost."""
        if self.times > 0 and any(self.match.matches(r, consumer) for r in records):
            self.times -= 1
            return True
        return False


def deliver(
    log: TopicLog, consumers: Sequence[Consumer], holds: Sequence[Match], drops: Sequence[Drop]
) -> list[Delivery]:
    """One round: every consumer's unread records, per partition, up to the first held one."""
    done = []
    for consumer in consumers:
        for topic, partition in log.topic_partitions(consumer.job.topics):
            start = consumer.positions.get((topic, partition), 0)
            ready = tuple(deliverable(log.records(topic, partition, start), consumer.name, holds))
            if not ready:
                continue
            if any(drop.takes(ready, consumer.name) for drop in drops):
                done.append(Delivery(consumer.name, ready, "lost", None))
                continue
            result = consumer.inbox.apply_partition(ready)
            consumer.positions[(topic, partition)] = ready[-1].offset + 1
            done.append(Delivery(consumer.name, ready, "read", result))
    return done


def replay(consumer: Consumer, record: KafkaRecord) -> Delivery:
    """Hand ``record`` (read before) to the consumer's inbox again, at its offset."""
    return Delivery(consumer.name, (record,), "replay", consumer.inbox.apply_partition([record]))
