"""The apply loop: one partition's ordered records in ONE transaction on the consumer's database."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from sqlalchemy import ColumnElement, Table, delete, func, insert, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from inbox.decision import Action, Decider, Incoming, PartitionView, prune_floor
from inbox.tables import parked, recent_ids, watermarks
from outbox.envelope import Envelope
from outbox.record import KafkaRecord, UndecodableRecord, decode, header_map

Handler = Callable[[Envelope, Session], None]
log = logging.getLogger(__name__)

DEFAULT_WINDOW = 50_000  # offsets per partition; Debezium re-sends measured in the hundreds


@dataclass
class BatchResult:
    """What one partition batch did."""

    topic: str
    partition: int
    watermark: int
    counts: dict[Action, int] = field(default_factory=dict)

    def count(self, action: Action) -> int:
        """How many records got ``action``."""
        return self.counts.get(action, 0)


@dataclass(frozen=True)
class Inbox:
    """Applies records for one consumer through its handlers, exactly once per event."""

    engine: Engine
    consumer: str
    handlers: Mapping[str, Handler] | Handler
    # Offsets of applied event ids kept per partition against re-sent events (at-least-once
    # producers); 0 keeps none: the watermark alone, exact for exactly-once topics.
    window: int = DEFAULT_WINDOW
    max_attempts: int = 3
    # One savepoint around the batch, falling back to one per record when a handler fails.
    # False: a savepoint per record from the start (two more round trips per record).
    optimistic: bool = True

    def _handler_for(self, event_type: str) -> Handler:
        if callable(self.handlers):
            return self.handlers
        return self.handlers[event_type]

    def handles(self, event_type: str) -> bool:
        """True when a handler exists for ``event_type``."""
        return callable(self.handlers) or event_type in self.handlers

    def remember(
        self, session: Session, topic: str, partition: int, event_id: str, offset: int
    ) -> None:
        """Record an applied event id in the partition's dedup window (none when it is 0)."""
        if not self.window:
            return
        session.execute(
            insert(recent_ids).values(
                consumer=self.consumer,
                topic=topic,
                partition=partition,
                event_id=event_id,
                offset=offset,
            )
        )

    def _known_types(self) -> frozenset[str] | None:
        return None if callable(self.handlers) else frozenset(self.handlers)

    def apply_partition(self, records: Sequence[KafkaRecord]) -> BatchResult:
        """Decide and apply one partition's records, advance its watermark, commit."""
        if not records:
            raise ValueError("apply_partition needs at least one record")
        topic, partition = records[0].topic, records[0].partition
        if any((r.topic, r.partition) != (topic, partition) for r in records):
            raise ValueError("apply_partition takes the records of ONE topic partition")
        with Session(self.engine) as session, session.begin():
            mark = self.lock_watermark(session, topic, partition)
            decoded = {r.offset: _decode(r) for r in records}
            incoming = sorted(
                (_incoming(r, decoded[r.offset]) for r in records), key=lambda i: i.offset
            )
            view = PartitionView(
                watermark=mark,
                recent_ids=self.recent(session, topic, partition, [i.event_id for i in incoming]),
                parked_keys=self._parked_keys(session, topic, partition, [i.key for i in incoming]),
            )
            by_offset = {r.offset: r for r in records}
            result = None
            if self.optimistic:
                try:
                    # Handlers almost never fail, and a savepoint per record costs two round
                    # trips each: try the whole batch under one savepoint first.
                    with session.begin_nested():
                        result = self._run(session, view, incoming, by_offset, decoded, False)
                except Exception as exc:  # a handler failed: redo record by record, retrying
                    log.info("%s[%d]: per-record apply after %r", topic, partition, exc)
            if result is None:
                result = self._run(session, view, incoming, by_offset, decoded, True)
            session.execute(
                update(watermarks)
                .where(*self.match(watermarks, topic, partition))
                .values(offset=result.watermark, updated_at=func.now())
            )
            if self.window:
                floor = prune_floor(result.watermark, self.window)
                session.execute(
                    delete(recent_ids).where(
                        *self.match(recent_ids, topic, partition), recent_ids.c.offset < floor
                    )
                )
        return result

    def _run(
        self,
        session: Session,
        view: PartitionView,
        incoming: Sequence[Incoming],
        by_offset: Mapping[int, KafkaRecord],
        decoded: Mapping[int, Envelope | str],
        guarded: bool,
    ) -> BatchResult:
        """Decide and apply ``incoming`` in offset order. Unguarded, a handler error propagates;
        guarded, each handler runs in its own savepoint with retries and a failure parks."""
        first = by_offset[incoming[0].offset]
        result = BatchResult(first.topic, first.partition, view.watermark)
        scope = {"consumer": self.consumer, "topic": first.topic, "partition": first.partition}
        fresh: list[dict[str, object]] = []
        decider = Decider(view, known_types=self._known_types())
        for item in incoming:
            decision = decider.decide(item)
            record, envelope = by_offset[decision.offset], decoded[decision.offset]
            action, reason, attempts = decision.action, decision.reason, 1
            if action is Action.APPLY:
                assert isinstance(envelope, Envelope)
                if guarded:
                    error, attempts = self.apply_one(session, envelope)
                else:
                    self._handler_for(envelope.event_type)(envelope, session)
                    error = None
                if error is None:
                    fresh.append(
                        {**scope, "event_id": str(envelope.event_id), "offset": record.offset}
                    )
                else:
                    action, reason = Action.PARK, error
                    decider.parked(item)  # later records of this key wait behind it
            if action in (Action.PARK, Action.HOLD):
                self._park(session, record, envelope, reason, attempts)
            result.counts[action] = result.counts.get(action, 0) + 1
            result.watermark = max(result.watermark, record.offset)
        if fresh and self.window:
            session.execute(insert(recent_ids), fresh)
        return result

    def apply_one(self, session: Session, envelope: Envelope) -> tuple[str | None, int]:
        """Run the handler in a savepoint, retrying; (None, attempts) or (last error, attempts)."""
        error = ""
        for attempt in range(1, self.max_attempts + 1):
            try:
                with session.begin_nested():
                    self._handler_for(envelope.event_type)(envelope, session)
                return None, attempt
            except Exception as exc:  # a failing handler is retried, then parked; never lost
                error = f"handler failed: {type(exc).__name__}: {exc}"
                log.warning("%s (attempt %d/%d)", error, attempt, self.max_attempts)
        return error, self.max_attempts

    def match(self, table: Table, topic: str, partition: int) -> tuple[ColumnElement[bool], ...]:
        """Filter of ``table`` to this consumer's rows of one topic partition."""
        return (
            table.c.consumer == self.consumer,
            table.c.topic == topic,
            table.c.partition == partition,
        )

    def lock_watermark(self, session: Session, topic: str, partition: int) -> int:
        # The row lock serialises every instance of this consumer on this partition: a second
        # instance waits here, then sees the advanced watermark and skips the whole batch.
        session.execute(
            pg_insert(watermarks)
            .values(consumer=self.consumer, topic=topic, partition=partition, offset=-1)
            .on_conflict_do_nothing()
        )
        return int(
            session.execute(
                select(watermarks.c.offset)
                .where(*self.match(watermarks, topic, partition))
                .with_for_update()
            ).scalar_one()
        )

    def recent(
        self, session: Session, topic: str, partition: int, ids: Sequence[str | None]
    ) -> frozenset[str]:
        """Which of ``ids`` were applied within the window."""
        wanted = sorted({i for i in ids if i})
        if not wanted or not self.window:
            return frozenset()
        rows = session.execute(
            select(recent_ids.c.event_id).where(
                *self.match(recent_ids, topic, partition), recent_ids.c.event_id.in_(wanted)
            )
        )
        return frozenset(r[0] for r in rows)

    def _parked_keys(
        self, session: Session, topic: str, partition: int, keys: Sequence[str | None]
    ) -> frozenset[str]:
        """Which of ``keys`` have a parked record waiting for redrive."""
        wanted = sorted({k for k in keys if k is not None})
        if not wanted:
            return frozenset()
        rows = session.execute(
            select(parked.c.key)
            .distinct()
            .where(*self.match(parked, topic, partition), parked.c.key.in_(wanted))
        )
        return frozenset(r[0] for r in rows)

    def _park(
        self,
        session: Session,
        record: KafkaRecord,
        envelope: Envelope | str,
        reason: str,
        attempts: int,
    ) -> None:
        event = envelope if isinstance(envelope, Envelope) else None
        hdrs = header_map(record.headers)
        session.execute(
            pg_insert(parked)
            .values(
                consumer=self.consumer,
                topic=record.topic,
                partition=record.partition,
                offset=record.offset,
                key=record.key.decode("utf-8", "replace") if record.key is not None else None,
                event_id=str(event.event_id) if event else hdrs.get("id"),
                event_type=event.event_type if event else hdrs.get("eventType"),
                headers=hdrs,
                payload=record.value,
                error=reason,
                attempts=attempts,
            )
            .on_conflict_do_nothing(constraint="uq_inbox_parked_offset")
        )


def _decode(record: KafkaRecord) -> Envelope | str:
    try:
        return decode(record.key, record.value, record.headers, record.timestamp_ms)
    except UndecodableRecord as exc:
        return str(exc)


def _incoming(record: KafkaRecord, envelope: Envelope | str) -> Incoming:
    key = record.key.decode("utf-8", "replace") if record.key is not None else None
    if isinstance(envelope, Envelope):
        return Incoming(record.offset, key, str(envelope.event_id), envelope.event_type)
    hdrs = header_map(record.headers)
    return Incoming(record.offset, key, hdrs.get("id"), hdrs.get("eventType"), envelope)
