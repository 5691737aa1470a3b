"""`outboxkit audit`: every event on a consumer's topics accounted for, per partition.

Reads the job's topics from the beginning to their current end (``read_committed``, as the
consumer reads them) and its inbox rows (watermarks, the ledger, parked and skipped records),
then sorts each event, by event id (a record without a readable id by its offset), into:

- **applied**: in the ledger once;
- **duplicate**: in the ledger more than once (its effect was applied twice);
- **parked** / **skipped**: not applied, kept with the reason (`outboxkit inbox parked`), or
  explicitly skipped by an operator;
- **pending**: above the partition's watermark: not reached yet;
- **lost**: at or below the watermark, yet neither applied, parked nor skipped.

A re-send (the same event id at a later offset, from an at-least-once source) is one event.
Without a ledger (it is opt-in: ``Job.ledger``, ``<PREFIX>LEDGER=true``) applied and lost cannot
be told apart: the audit then says so and counts events at or below the watermark as *covered*.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, cast

from confluent_kafka import Consumer, KafkaError, TopicPartition
from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from inbox.tables import ledger, parked, skipped, watermarks
from outboxkit.kernel.kafka.security import QUIET_LOGS, librdkafka_config
from outboxkit.kernel.wire.record import KafkaRecord, read
from spark_consumers.job import Job

CATEGORIES = ("applied", "duplicate", "parked", "skipped", "pending", "lost")
EXAMPLES = 5


@dataclass(frozen=True)
class Event:
    """One event on a partition: its id (None when unreadable) and every offset carrying it."""

    event_id: str | None
    offsets: tuple[int, ...]


@dataclass
class PartitionAudit:
    """The events of one partition, sorted into ``CATEGORIES``."""

    topic: str
    partition: int
    watermark: int  # -1 when nothing was applied yet
    end: int  # the partition's end offset when it was read
    events: int = 0
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0))
    # A few event ids (or offsets) of the categories that must stay empty.
    examples: dict[str, list[str]] = field(default_factory=lambda: {"lost": [], "duplicate": []})
    # For each duplicate example, the offsets its ledger rows were applied at: two offsets is a
    # re-send by the source that the inbox let through, one offset twice a record applied twice.
    applied_at: dict[str, list[int]] = field(default_factory=dict)


@dataclass
class ConsumerAudit:
    """One consumer's audit: per partition, and whether its ledger could tell applied from lost.

    Attributes:
        consumer: The consumer's name.
        topics: The topics its job reads.
        exact: A ledger exists: lost and duplicate are counted.
        partitions: Each partition's events, sorted into the categories above.
        ledger_only: Ledger ids not found on the topics (e.g. past retention).
    """

    consumer: str
    topics: tuple[str, ...]
    exact: bool
    partitions: list[PartitionAudit]
    ledger_only: int = 0

    def total(self, category: str) -> int:
        """How many events of every partition are in ``category``.

        Args:
            category: One of ``applied``, ``duplicate``, ``parked``, ``skipped``, ``pending``,
                ``lost``.
        """
        return sum(p.counts[category] for p in self.partitions)

    @property
    def ok(self) -> bool:
        """Nothing lost, nothing applied twice (always False without a ledger: unknown)."""
        return self.exact and self.total("lost") == 0 and self.total("duplicate") == 0

    def as_dict(self) -> dict[str, Any]:
        totals = {c: self.total(c) for c in CATEGORIES}
        return {**asdict(self), "totals": totals, "ok": self.ok}


@dataclass(frozen=True)
class InboxRows:
    """What the inbox holds for one consumer, as the audit needs it."""

    watermarks: Mapping[tuple[str, int], int]
    applied: Counter[str]  # event id -> ledger rows
    parked: frozenset[tuple[str, int, int]]  # (topic, partition, offset)
    skipped: frozenset[tuple[str, int, int]]
    has_ledger: bool
    # The ledger offsets of every event id applied more than once.
    twice: Mapping[str, tuple[int, ...]] = field(default_factory=dict)


def classify(
    topic: str,
    partition: int,
    events: Sequence[Event],
    rows: InboxRows,
    end: int,
    *,
    exact: bool,
) -> PartitionAudit:
    """Sort one partition's events (pure: no I/O)."""
    mark = rows.watermarks.get((topic, partition), -1)
    audit = PartitionAudit(topic, partition, mark, end, events=len(events))
    for event in events:
        category = _category(topic, partition, event, rows, mark, exact=exact)
        audit.counts[category] += 1
        if category in audit.examples and len(audit.examples[category]) < EXAMPLES:
            audit.examples[category].append(event.event_id or f"offset {event.offsets[0]}")
            if category == "duplicate" and event.event_id is not None:
                audit.applied_at[event.event_id] = list(rows.twice.get(event.event_id, ()))
    return audit


def _category(
    topic: str, partition: int, event: Event, rows: InboxRows, mark: int, *, exact: bool
) -> str:
    times = rows.applied.get(event.event_id, 0) if event.event_id else 0
    if times > 1:
        return "duplicate"
    if times == 1:
        return "applied"
    places = {(topic, partition, offset) for offset in event.offsets}
    if places & rows.parked:
        return "parked"
    if places & rows.skipped:
        return "skipped"
    if min(event.offsets) > mark:
        return "pending"
    return "lost" if exact else "applied"  # without a ledger: covered by the watermark


def verdict(topic: str, partition: int, event: Event, rows: InboxRows) -> str:
    """One event's category (`CATEGORIES`), as the audit sorts it: the console's answer to
    "where is my event?" once it found the event's offsets."""
    mark = rows.watermarks.get((topic, partition), -1)
    return _category(topic, partition, event, rows, mark, exact=rows.has_ledger)


def group_events(records: Iterable[tuple[int, str | None]]) -> list[Event]:
    """(offset, event id) pairs of one partition as events: one per id, in first-offset order."""
    by_id: dict[str, list[int]] = defaultdict(list)
    events: list[Event] = []
    for offset, event_id in sorted(records):
        if event_id is None:
            events.append(Event(None, (offset,)))
        elif event_id in by_id:
            by_id[event_id].append(offset)
        else:
            by_id[event_id].append(offset)
            events.append(Event(event_id, ()))
    return [
        Event(e.event_id, tuple(by_id[e.event_id])) if e.event_id is not None else e for e in events
    ]


def read_topics(
    bootstrap: str, topics: Sequence[str], options: Mapping[str, str] | None = None
) -> tuple[dict[tuple[str, int], list[tuple[int, str | None]]], dict[tuple[str, int], int]]:
    """Every committed record of ``topics`` up to their current end, as (offset, event id)
    per partition, and each partition's end offset."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "outboxkit-audit",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            **(options or {}),  # the job's client options (security), as the runner uses them
        }
    )
    found: dict[tuple[str, int], list[tuple[int, str | None]]] = defaultdict(list)
    ends: dict[tuple[str, int], int] = {}
    try:
        metadata = consumer.list_topics(timeout=30).topics
        assignment = []
        for topic in topics:
            meta = metadata.get(topic)
            if meta is None or meta.error is not None:
                continue  # never written to: nothing published
            for p in sorted(meta.partitions):
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
                ends[(topic, p)] = high
                found[(topic, p)] = []  # an empty partition is still audited
                if high > low:
                    assignment.append(TopicPartition(topic, p, low))
        remaining = {(tp.topic, tp.partition) for tp in assignment}
        consumer.assign(assignment)
        while remaining:
            message = consumer.poll(10)
            if message is None:
                raise TimeoutError(f"audit: no record for 10 s; still reading {sorted(remaining)}")
            error = message.error()
            topic, partition = cast(str, message.topic()), cast(int, message.partition())
            where = (topic, partition)
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(f"audit: reading {where}: {error}")
                remaining.discard(where)
                continue
            offset = cast(int, message.offset())
            if offset < ends[where]:
                headers = cast(list[tuple[str, bytes | None]], message.headers() or [])
                record = KafkaRecord(
                    topic, partition, offset, message.key(), message.value(), headers
                )
                found[where].append((offset, read(record).event_id))
            if offset >= ends[where] - 1:
                remaining.discard(where)
    finally:
        consumer.close()
    return dict(found), ends


def inbox_rows(conn: Connection, consumer: str, topics: Sequence[str]) -> InboxRows:
    """The consumer's watermarks, ledger counts, parked and skipped offsets on ``topics``."""
    marks = {
        (r.topic, r.partition): r.offset
        for r in conn.execute(
            select(watermarks.c.topic, watermarks.c.partition, watermarks.c.offset).where(
                watermarks.c.consumer == consumer, watermarks.c.topic.in_(topics)
            )
        )
    }
    applied: Counter[str] = Counter()
    twice: dict[str, tuple[int, ...]] = {}  # the ledger offsets of ids applied more than once
    for event_id, offsets in conn.execute(
        select(ledger.c.event_id, func.array_agg(ledger.c.offset))
        .where(ledger.c.consumer == consumer, ledger.c.topic.in_(topics))
        .group_by(ledger.c.event_id)
    ):
        applied[event_id] = len(offsets)  # one ledger row per application
        if len(offsets) > 1:
            twice[event_id] = tuple(sorted(offsets))

    def places(table: Any) -> frozenset[tuple[str, int, int]]:
        rows = conn.execute(
            select(table.c.topic, table.c.partition, table.c.offset).where(
                table.c.consumer == consumer, table.c.topic.in_(topics)
            )
        )
        return frozenset((r.topic, r.partition, r.offset) for r in rows)

    return InboxRows(
        marks,
        applied,
        places(parked),
        places(skipped),
        has_ledger=bool(applied),
        twice=twice,
    )


def audit(job: Job, conn: Connection) -> ConsumerAudit:
    """Audit one job's consumer against its topics."""
    options = {**QUIET_LOGS, **librdkafka_config(job.kafka_security), **job.kafka_options}
    records, ends = read_topics(job.bootstrap_servers, job.topics, options)
    rows = inbox_rows(conn, job.consumer, job.topics)
    exact = job.ledger or rows.has_ledger
    partitions = [
        classify(topic, partition, group_events(found), rows, ends[(topic, partition)], exact=exact)
        for (topic, partition), found in sorted(records.items())
    ]
    on_topics = {e for found in records.values() for _, e in found if e is not None}
    return ConsumerAudit(
        job.consumer,
        job.topics,
        exact,
        partitions,
        ledger_only=sum(1 for event_id in rows.applied if event_id not in on_topics),
    )
