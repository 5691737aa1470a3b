"""The apply loop: one partition's ordered records in ONE transaction on the consumer's database."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import cast

from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from inbox.decision import Action, Decider, Incoming, PartitionView
from inbox.recorder import Recorder
from inbox.tracing import RecordSpans, ended
from outbox.envelope import Envelope
from outbox.errors import is_transient
from outbox.publish import Outbox
from outbox.tracing.context import TraceContext
from outbox.unit import PublishedObserver, UnitOfWork
from outbox.wire.record import Decoded, KafkaRecord, read

# A handler applies one event in the inbox's transaction through the unit of work it is given:
# business writes on ``uow.session``, follow-up events with ``uow.publish``.
Handler = Callable[[Envelope, UnitOfWork], None]
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchHandler:
    """Applies a partition's slice set-wise: ``apply(events, uow)`` gets every event the inbox
    decided to apply, in offset order, and the unit of work of the partition's transaction.

    It writes with a few set-wise statements (``executemany``, multi-row VALUES, COPY) instead
    of one per event, and publishes the next events with ``uow.publish_many`` (``caused_by``
    carries each consumed event's trace on). It must keep per-key order itself: events of one
    key arrive in the order they were published. When it raises, the inbox rolls the slice back
    and applies the events one by one (``apply([event], uow)``), so the failing event is retried,
    then parked, and only its key waits."""

    apply: Callable[[Sequence[Envelope], UnitOfWork], None]
    # The event types it applies (others are parked as unknown); None: every type.
    event_types: frozenset[str] | None = None
    # Why an event's payload must not be applied, None when it may (pure: no I/O). An event it
    # rejects is parked with that reason before ``apply`` sees it, not retried. None: no check.
    validate: Callable[[Envelope], str | None] | None = None

    def handles(self, event_type: str) -> bool:
        """True when ``event_type`` is applied by this handler."""
        return self.event_types is None or event_type in self.event_types

    def invalid(self, event: Envelope) -> str | None:
        """Why ``event`` must not be applied (``validate`` rejected it), else None."""
        if self.validate is None or not self.handles(event.event_type):
            return None
        try:
            return self.validate(event)
        except Exception as exc:  # a check crashing on a payload rejects it: parked, not lost
            log.warning("the payload check of event %s failed", event.event_id, exc_info=True)
            return f"the payload check failed: {type(exc).__name__}: {exc}"


Handlers = Mapping[str, Handler] | Handler | BatchHandler


def as_batch(handlers: Handlers) -> BatchHandler:
    """The one-event API as a batch handler: each event through its handler, in offset order,
    with a unit of work whose span continues the event's trace."""
    if isinstance(handlers, BatchHandler):
        return handlers
    if callable(handlers):
        single = handlers

        def each(events: Sequence[Envelope], uow: UnitOfWork) -> None:
            for event in events:
                single(event, uow.for_event(event))

        return BatchHandler(each)
    by_type = dict(handlers)

    def each_by_type(events: Sequence[Envelope], uow: UnitOfWork) -> None:
        for event in events:
            by_type[event.event_type](event, uow.for_event(event))

    return BatchHandler(each_by_type, frozenset(by_type))


DEFAULT_MAX_ATTEMPTS = 3  # runs of a failing handler before its record is parked
DEFAULT_WINDOW = 50_000  # offsets per partition; Debezium re-sends measured in the hundreds


@dataclass
class BatchResult:
    """What one partition batch did."""

    topic: str
    partition: int
    watermark: int
    counts: dict[Action, int] = field(default_factory=dict)
    # Events the handlers published, committed with the batch.
    published: list[Envelope] = field(default_factory=list)

    def count(self, action: Action) -> int:
        """How many records got ``action``."""
        return self.counts.get(action, 0)

    def published_by_type(self) -> Counter[tuple[str, str]]:
        """How many events the handlers published, by (aggregate type, event type)."""
        return Counter((e.aggregate_type, e.event_type) for e in self.published)


@dataclass(frozen=True)
class HandlerOutcome:
    """How running a handler ended: ``error`` is None when it applied."""

    attempts: int
    error: str | None = None
    published: tuple[Envelope, ...] = ()

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class _Slice:
    """What applying one partition's records decided, before the bookkeeping is written."""

    result: BatchResult
    applied: list[tuple[str, int]] = field(default_factory=list)  # (event id, offset)
    parked: list[tuple[Decoded, str, int]] = field(default_factory=list)  # record, why, attempts

    def count(self, item: Decoded, action: Action, reason: str = "", attempts: int = 1) -> None:
        result = self.result
        result.counts[action] = result.counts.get(action, 0) + 1
        result.watermark = max(result.watermark, item.record.offset)
        if action is Action.APPLY and item.event_id is not None:
            self.applied.append((item.event_id, item.record.offset))
        elif action in (Action.PARK, Action.HOLD):
            self.parked.append((item, reason, attempts))


@dataclass(frozen=True)
class Inbox:
    """Applies records for one consumer through its handlers, exactly once per event."""

    engine: Engine
    consumer: str
    handlers: Handlers
    # Offsets of applied event ids kept per partition against re-sends (at-least-once
    # producers); 0 keeps none: the watermark alone, exact for exactly-once topics.
    window: int = DEFAULT_WINDOW
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    # One savepoint around the slice, falling back to one per record when a handler fails.
    # False: a savepoint per record from the start (two more round trips per record).
    optimistic: bool = True
    # How the handlers' events are written (the consuming service's outbox).
    outbox: Outbox = field(default_factory=Outbox)
    # Told what the handlers published once the partition's transaction committed.
    on_published: PublishedObserver | None = None
    # Append every applied event to the ledger (`outboxkit audit`); grows with the message count.
    ledger: bool = False

    @property
    def recorder(self) -> Recorder:
        """This consumer's inbox rows."""
        return Recorder(self.consumer, self.window, self.ledger)

    @cached_property
    def batch(self) -> BatchHandler:
        """The handlers as one batch handler (the one-event API wrapped)."""
        return as_batch(self.handlers)

    def handles(self, event_type: str) -> bool:
        """True when a handler exists for ``event_type``."""
        return self.batch.handles(event_type)

    def apply_partition(self, records: Sequence[KafkaRecord]) -> BatchResult:
        """Decide and apply one partition's records, advance its watermark, commit.

        The bookkeeping takes a constant number of statements whatever the slice's size: lock
        and read the watermark, the window's ids and the parked keys of the slice, then write the
        applied ids, the parked records and the new watermark in one statement each.

        No record's bytes can stop the partition: a record that cannot be decoded or applied is
        parked, and should the partition's transaction fail anyway on something in the data
        (not on an unreachable database, which is raised for the caller to retry), it is redone
        record by record, and as a last resort every new record of the slice is parked with its
        raw bytes and the reason, so the records behind it move on."""
        if not records:
            raise ValueError("apply_partition needs at least one record")
        topic, partition = records[0].topic, records[0].partition
        if any((r.topic, r.partition) != (topic, partition) for r in records):
            raise ValueError("apply_partition takes the records of ONE topic partition")
        ordered = sorted(records, key=lambda r: r.offset)
        attempts: list[Callable[[Sequence[KafkaRecord]], BatchResult]] = [
            lambda rs: self._transaction(rs, optimistic=self.optimistic),
            lambda rs: self._transaction(rs, optimistic=False, immediate=True),
        ]
        for attempt in attempts:
            try:
                return attempt(ordered)
            except Exception as exc:
                if is_transient(exc):
                    raise
                error = exc
                log.exception("%s[%d]: the partition's transaction failed", topic, partition)
        return self._park_all(ordered, f"the inbox transaction failed: {_describe(error)}")

    def _transaction(
        self, records: Sequence[KafkaRecord], *, optimistic: bool, immediate: bool = False
    ) -> BatchResult:
        """One try at the slice in one transaction; the replay check comes before decoding.
        ``immediate``: deferred constraints are checked at each statement, inside the record's
        savepoint, so a record breaking one is parked instead of failing the commit."""
        topic, partition = records[0].topic, records[0].partition
        recorder = self.recorder
        with Session(self.engine) as session, session.begin():
            if immediate:
                session.execute(text("SET CONSTRAINTS ALL IMMEDIATE"))
            mark = recorder.lock(session, topic, partition)
            decoded = [read(r) for r in records if r.offset > mark]
            replays = len(records) - len(decoded)
            if not decoded:
                return BatchResult(topic, partition, mark, {Action.SKIP_REPLAY: replays})
            view = PartitionView(
                watermark=mark,
                recent_ids=recorder.recent(
                    session, topic, partition, (d.event_id for d in decoded)
                ),
                parked_keys=recorder.parked_keys(
                    session, topic, partition, (d.key for d in decoded)
                ),
            )
            done = self._apply_slice(session, view, decoded) if optimistic else None
            if done is None:
                done = self._apply_each(session, view, decoded)
            recorder.park(session, done.parked)
            recorder.remember(session, topic, partition, done.applied)
            recorder.append_ledger(session, topic, partition, done.applied)
            recorder.advance(session, topic, partition, done.result.watermark)
        result = done.result
        if replays:
            result.counts[Action.SKIP_REPLAY] = result.count(Action.SKIP_REPLAY) + replays
        if result.published and self.on_published is not None:
            self.on_published(result.published)
        return result

    def _park_all(self, records: Sequence[KafkaRecord], reason: str) -> BatchResult:
        """The last resort: park every record above the watermark, raw bytes and reason, and
        move the watermark past them (redrive applies them once the cause is fixed)."""
        topic, partition = records[0].topic, records[0].partition
        recorder = self.recorder
        with Session(self.engine) as session, session.begin():
            mark = recorder.lock(session, topic, partition)
            fresh = [read(r) for r in records if r.offset > mark]
            done = _Slice(BatchResult(topic, partition, mark))
            for item in fresh:
                done.count(item, Action.PARK, reason, 0)
            recorder.park(session, done.parked)
            recorder.advance(session, topic, partition, done.result.watermark)
        result = done.result
        if len(fresh) < len(records):
            result.counts[Action.SKIP_REPLAY] = len(records) - len(fresh)
        log.error("%s[%d]: %d records parked: %s", topic, partition, len(fresh), reason)
        return result

    def _apply_slice(
        self, session: Session, view: PartitionView, decoded: Sequence[Decoded]
    ) -> _Slice | None:
        """Every record decided up front, the ones to apply through the batch handler at once
        under one savepoint; None when the handler raised (nothing of it is kept)."""
        first = decoded[0].record
        done = _Slice(BatchResult(first.topic, first.partition, view.watermark))
        decider = Decider(view, known_types=self.batch.event_types)
        decisions = [(item, decider.decide(_incoming(item, self.batch))) for item in decoded]
        events = [item.envelope for item, d in decisions if d.action is Action.APPLY]
        spans = RecordSpans(self.consumer, [item for item, _ in decisions])
        uow = UnitOfWork(session, self.outbox, event_spans=spans.by_event_id())
        started = time.perf_counter()
        try:
            with session.begin_nested():
                if events:
                    self.batch.apply(cast(list[Envelope], events), uow)
        except Exception as exc:  # a handler failed: redo record by record, retrying
            spans.end_all(f"the slice's handler failed, redone record by record: {exc!r}")
            if is_transient(exc):  # the database went away: the whole batch is retried
                raise
            log.info("%s[%d]: per-record apply after %r", first.topic, first.partition, exc)
            return None
        took = time.perf_counter() - started  # the slice's, shared by its applied events
        for (item, decision), traced in zip(decisions, spans.started, strict=True):
            done.count(item, decision.action, decision.reason)
            applied = decision.action is Action.APPLY
            ended(
                traced, decision.action, decision.reason, handler_seconds=took if applied else None
            )
        done.result.published.extend(uow.published)
        return done

    def _apply_each(
        self, session: Session, view: PartitionView, decoded: Sequence[Decoded]
    ) -> _Slice:
        """Decide and apply record by record, each in its own savepoint with retries: a record
        whose handler keeps failing is parked, and the later records of its key behind it."""
        first = decoded[0].record
        done = _Slice(BatchResult(first.topic, first.partition, view.watermark))
        decider = Decider(view, known_types=self.batch.event_types)
        spans = RecordSpans(self.consumer)
        for item in decoded:
            incoming = _incoming(item, self.batch)
            decision = decider.decide(incoming)
            action, reason, attempts, took = decision.action, decision.reason, 1, None
            traced = spans.start(item)
            if action is Action.APPLY:
                assert item.envelope is not None  # decided APPLY: it decoded
                started = time.perf_counter()
                outcome = self.apply_one(session, item.envelope, spans.context(traced))
                took, attempts = time.perf_counter() - started, outcome.attempts
                if outcome.ok:
                    done.result.published.extend(outcome.published)
                else:
                    action, reason = Action.PARK, str(outcome.error)
                    decider.parked(incoming)  # later records of this key wait behind it
            done.count(item, action, reason, attempts)
            ended(traced, action, reason, handler_seconds=took, attempts=attempts)
        return done

    def apply_one(
        self, session: Session, envelope: Envelope, span: TraceContext | None = None
    ) -> HandlerOutcome:
        """Run the handler for one event in a savepoint, retrying up to ``max_attempts`` times
        (``span``: the span applying it, which the events the handler publishes continue)."""
        error = ""
        event_spans = {str(envelope.event_id): span} if span is not None else None
        for attempt in range(1, self.max_attempts + 1):
            uow = UnitOfWork(session, self.outbox, event_spans=event_spans)
            try:
                with session.begin_nested():
                    self.batch.apply([envelope], uow)
                return HandlerOutcome(attempt, None, tuple(uow.published))
            except Exception as exc:  # a failing handler is retried, then parked; never lost
                if is_transient(exc):  # not the event's fault: the batch is retried
                    raise
                error = f"handler failed: {type(exc).__name__}: {exc}"
                log.warning("%s (attempt %d/%d)", error, attempt, self.max_attempts)
        return HandlerOutcome(self.max_attempts, error)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _incoming(item: Decoded, batch: BatchHandler) -> Incoming:
    invalid = None if item.envelope is None else batch.invalid(item.envelope)
    record = item.record
    return Incoming(record.offset, item.key, item.event_id, item.event_type, item.problem, invalid)
