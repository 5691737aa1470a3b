"""Inbox lag: how far a consumer's applied offsets are behind Kafka, read at scrape time. One
rule and one reader for every process that reports it (a service's `/metrics` and a consumer
driver's)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy.engine import Connection

from inbox.operations import watermark_rows
from outboxkit.kernel.kafka.offsets import PartitionOffsets


@dataclass(frozen=True)
class PartitionLag:
    """One partition of a consumer, as its watermark and Kafka show it at one read.

    Attributes:
        consumer: The inbox consumer name.
        topic: The topic.
        partition: The partition.
        watermark: The highest offset applied or skipped past; None: nothing yet.
        bounds: Kafka's (first, end) offsets of the partition; None: Kafka did not answer
            (or no Kafka is configured).
    """

    consumer: str
    topic: str
    partition: int
    watermark: int | None
    bounds: tuple[int, int] | None

    @property
    def lag(self) -> int | None:
        """Offsets from the next one to apply up to the end; None without Kafka's bounds. A
        transaction's commit marker takes an offset too, so a fully applied transactional
        partition may lag by one; a partition with nothing applied counts from its first
        offset (retention may have deleted older ones)."""
        if self.bounds is None:
            return None
        first, end = self.bounds
        following = first if self.watermark is None else self.watermark + 1
        return max(0, end - following)


def read_lags(
    conn: Connection,
    consumers: Sequence[str],
    offsets: PartitionOffsets | None,
    topics: Iterable[str] = (),
) -> list[PartitionLag]:
    """The lag of every partition ``consumers`` have a watermark for (all consumers when
    empty), and of every partition Kafka has of ``topics`` (listed with no watermark when none
    was applied yet); bounds None where ``offsets`` is None or Kafka does not answer."""
    marks: dict[tuple[str, str, int], int | None] = {
        (c, t, p): o for c, t, p, o in watermark_rows(conn, consumers)
    }
    wanted = list(topics)
    if offsets is not None and wanted:
        for consumer in consumers:
            for topic in wanted:
                for partition in offsets.partitions(topic):
                    marks.setdefault((consumer, topic, partition), None)
    return [
        PartitionLag(c, t, p, mark, offsets.bounds(t, p) if offsets is not None else None)
        for (c, t, p), mark in sorted(marks.items())
    ]
