"""The apply loop: one partition's ordered records in ONE transaction on the consumer's database."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from inbox.decision import Action, Decider, Incoming, PartitionView
from inbox.recorder import Recorder
from outbox.envelope import Envelope
from outbox.publish import Outbox
from outbox.record import Decoded, KafkaRecord, read
from outbox.trace import TraceContext
from outbox.unit import PublishedObserver, UnitOfWork

# A handler applies one event in the inbox's transaction through the unit of work it is given:
# business writes on ``uow.session``, follow-up events with ``uow.publish``.
Handler = Callable[[Envelope, UnitOfWork], None]
log = logging.getLogger(__name__)

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


@dataclass(frozen=True)
class Inbox:
    """Applies records for one consumer through its handlers, exactly once per event."""

    engine: Engine
    consumer: str
    handlers: Mapping[str, Handler] | Handler
    # Offsets of applied event ids kept per partition against re-sent events (at-least-once
    # producers); 0 keeps none: the watermark alone, exact for exactly-once topics.
    window: int = DEFAULT_WINDOW
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    # One savepoint around the batch, falling back to one per record when a handler fails.
    # False: a savepoint per record from the start (two more round trips per record).
    optimistic: bool = True
    # How the handlers' events are written (the consuming service's outbox).
    outbox: Outbox = field(default_factory=Outbox)
    # Told what the handlers published once the partition's transaction committed.
    on_published: PublishedObserver | None = None

    @property
    def recorder(self) -> Recorder:
        """This consumer's inbox rows."""
        return Recorder(self.consumer, self.window)

    def _handler_for(self, event_type: str) -> Handler:
        if callable(self.handlers):
            return self.handlers
        return self.handlers[event_type]

    def handles(self, event_type: str) -> bool:
        """True when a handler exists for ``event_type``."""
        return callable(self.handlers) or event_type in self.handlers

    def _known_types(self) -> frozenset[str] | None:
        return None if callable(self.handlers) else frozenset(self.handlers)

    def apply_partition(self, records: Sequence[KafkaRecord]) -> BatchResult:
        """Decide and apply one partition's records, advance its watermark, commit."""
        if not records:
            raise ValueError("apply_partition needs at least one record")
        topic, partition = records[0].topic, records[0].partition
        if any((r.topic, r.partition) != (topic, partition) for r in records):
            raise ValueError("apply_partition takes the records of ONE topic partition")
        recorder = self.recorder
        decoded = sorted((read(r) for r in records), key=lambda d: d.record.offset)
        with Session(self.engine) as session, session.begin():
            mark = recorder.lock(session, topic, partition)
            view = PartitionView(
                watermark=mark,
                recent_ids=recorder.recent(
                    session, topic, partition, (d.event_id for d in decoded)
                ),
                parked_keys=recorder.parked_keys(
                    session, topic, partition, (d.key for d in decoded)
                ),
            )
            result = None
            if self.optimistic:
                try:
                    # Handlers almost never fail, and a savepoint per record costs two round
                    # trips each: try the whole batch under one savepoint first.
                    with session.begin_nested():
                        result = self._run(session, view, decoded, recorder, self._apply_once)
                except Exception as exc:  # a handler failed: redo record by record, retrying
                    log.info("%s[%d]: per-record apply after %r", topic, partition, exc)
            if result is None:
                result = self._run(session, view, decoded, recorder, self.apply_one)
            recorder.advance(session, topic, partition, result.watermark)
        if result.published and self.on_published is not None:
            self.on_published(result.published)
        return result

    def _run(
        self,
        session: Session,
        view: PartitionView,
        decoded: Sequence[Decoded],
        recorder: Recorder,
        apply: Callable[[Session, Envelope], HandlerOutcome],
    ) -> BatchResult:
        """Decide and apply ``decoded`` (in offset order) with ``apply``: `_apply_once` lets a
        handler error propagate, `apply_one` retries in a savepoint and reports the failure,
        which parks the record."""
        first = decoded[0].record
        result = BatchResult(first.topic, first.partition, view.watermark)
        applied: list[tuple[str, int]] = []
        decider = Decider(view, known_types=self._known_types())
        for item in decoded:
            incoming = _incoming(item)
            decision = decider.decide(incoming)
            action, reason, attempts = decision.action, decision.reason, 1
            if action is Action.APPLY:
                assert item.envelope is not None  # decided APPLY: it decoded
                outcome = apply(session, item.envelope)
                attempts = outcome.attempts
                if outcome.ok:
                    applied.append((str(item.envelope.event_id), item.record.offset))
                    result.published.extend(outcome.published)
                else:
                    action, reason = Action.PARK, str(outcome.error)
                    decider.parked(incoming)  # later records of this key wait behind it
            if action in (Action.PARK, Action.HOLD):
                recorder.park(session, item, reason, attempts)
            result.counts[action] = result.counts.get(action, 0) + 1
            result.watermark = max(result.watermark, item.record.offset)
        recorder.remember(session, first.topic, first.partition, applied)
        return result

    def _unit(self, session: Session, envelope: Envelope) -> UnitOfWork:
        """The unit of work of applying ``envelope``: its span continues the event's trace."""
        return UnitOfWork(session, self.outbox, TraceContext.continuing(envelope.traceparent))

    def _apply_once(self, session: Session, envelope: Envelope) -> HandlerOutcome:
        uow = self._unit(session, envelope)
        self._handler_for(envelope.event_type)(envelope, uow)
        return HandlerOutcome(1, None, tuple(uow.published))

    def apply_one(self, session: Session, envelope: Envelope) -> HandlerOutcome:
        """Run the handler in a savepoint, retrying up to ``max_attempts`` times."""
        error = ""
        for attempt in range(1, self.max_attempts + 1):
            uow = self._unit(session, envelope)
            try:
                with session.begin_nested():
                    self._handler_for(envelope.event_type)(envelope, uow)
                return HandlerOutcome(attempt, None, tuple(uow.published))
            except Exception as exc:  # a failing handler is retried, then parked; never lost
                error = f"handler failed: {type(exc).__name__}: {exc}"
                log.warning("%s (attempt %d/%d)", error, attempt, self.max_attempts)
        return HandlerOutcome(self.max_attempts, error)


def _incoming(item: Decoded) -> Incoming:
    return Incoming(item.record.offset, item.key, item.event_id, item.event_type, item.problem)
