"""One partition's slice inside the inbox's transaction: decided record by record (`Decider`),
then applied either at once through the batch handler (`optimistic`), or, when that raised (the
transaction rolled back, `HandlerFailed`), record by record in a new transaction, each in its own
savepoint with retries, parking what keeps failing (`one_by_one`). What it decided is a
`SliceOutcome`; the bookkeeping is written after."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import cast

from sqlalchemy.orm import Session

from inbox.decision import Action, Decider, Decision, Incoming, PartitionView
from inbox.handlers import BatchHandler
from inbox.parked_rows import Parking
from inbox.position import OffsetsMoved
from inbox.retries import RetryPolicy, retry_after
from inbox.tracing import RecordSpans, ended
from outbox.publish import Outbox
from outbox.unit import UnitOfWork
from outboxkit.kernel.envelope import Envelope
from outboxkit.kernel.errors import causes, is_transient
from outboxkit.kernel.tracing.context import TraceContext
from outboxkit.kernel.wire.record import Decoded

log = logging.getLogger(__name__)


@dataclass
class BatchResult:
    """What one partition batch did.

    Attributes:
        topic: The records' topic.
        partition: Their partition.
        watermark: The partition's highest offset done (applied, skipped or parked) after the
            batch.
        counts: How many records got each action (applied, skipped as a replay or a
            duplicate, parked, held behind a parked key).
        published: The events the handlers published, committed with the batch.
    """

    topic: str
    partition: int
    watermark: int
    counts: dict[Action, int] = field(default_factory=dict)
    published: list[Envelope] = field(default_factory=list)

    def count(self, action: Action) -> int:
        """How many records got ``action``.

        Args:
            action: What the apply loop did with a record.
        """
        return self.counts.get(action, 0)

    def published_by_type(self) -> Counter[tuple[str, str]]:
        """How many events the handlers published, by (aggregate type, event type)."""
        return Counter((e.aggregate_type, e.event_type) for e in self.published)


@dataclass(frozen=True)
class HandlerOutcome:
    """How running a handler ended: ``error`` is None when it applied.

    Attributes:
        attempts: How many times the handler ran (0: the event was not handed to it).
        error: Why it did not apply (the last failure, or why it was not run); None: applied.
        published: The events it published in the attempt that applied.
        passing: The failure was passing (`inbox.RetryPolicy.passing`): retried later.
        after: The delay the handler asked for (`inbox.RetryLater`), else None.
    """

    attempts: int
    error: str | None = None
    published: tuple[Envelope, ...] = ()
    passing: bool = False
    after: float | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class SliceOutcome:
    """What applying one partition's records decided, before the bookkeeping is written."""

    result: BatchResult
    applied: list[tuple[str, int]] = field(default_factory=list)  # (event id, offset)
    parked: list[Parking] = field(default_factory=list)

    def count(
        self,
        item: Decoded,
        action: Action,
        reason: str = "",
        attempts: int = 1,
        retry_in: float | None = None,
    ) -> None:
        """Count ``item`` as given ``action``; a parked one waits ``retry_in`` seconds for a
        delayed retry (None: parked for a person, or held behind its key)."""
        result = self.result
        result.counts[action] = result.counts.get(action, 0) + 1
        result.watermark = max(result.watermark, item.record.offset)
        if action is Action.APPLY and item.event_id is not None:
            self.applied.append((item.event_id, item.record.offset))
        elif action in (Action.PARK, Action.HOLD):
            failed = action is Action.PARK
            self.parked.append(Parking(item, reason, attempts, failed, retry_in))

    def count_applied(self, items: Sequence[Decoded]) -> None:
        """`count` of every record of ``items`` (decoded, in offset order) as applied, at once."""
        result = self.result
        result.counts[Action.APPLY] = result.counts.get(Action.APPLY, 0) + len(items)
        result.watermark = max(result.watermark, items[-1].record.offset)
        self.applied.extend(
            (item.event_id, item.record.offset) for item in items if item.event_id is not None
        )


class HandlerFailed(Exception):
    """The batch handler raised on a slice applied at once: its transaction must be rolled back
    (nothing of it is kept) and the slice redone record by record in a new one."""


@dataclass(frozen=True)
class SliceApplier:
    """Applies decided slices for one consumer through its batch handler."""

    consumer: str
    batch: BatchHandler
    outbox: Outbox
    max_attempts: int
    retry: RetryPolicy

    def optimistic(
        self, session: Session, view: PartitionView, decoded: Sequence[Decoded]
    ) -> SliceOutcome:
        """Every record decided up front, the ones to apply through the batch handler at once,
        in the transaction itself: no savepoint, two round trips fewer per slice. Raises
        `HandlerFailed` when the handler raised; the caller rolls the transaction back."""
        first = decoded[0].record
        done = SliceOutcome(BatchResult(first.topic, first.partition, view.watermark))
        fast = all_new(view, decoded, self.batch)  # the common slice: no record-by-record
        if fast:
            decisions = [(item, _APPLY) for item in decoded]
        else:
            decider = Decider(view, known_types=self.batch.event_types)
            decisions = [(item, decider.decide(incoming(item, self.batch))) for item in decoded]
            stopped(d for _, d in decisions)
        events = [item.envelope for item, d in decisions if d.action is Action.APPLY]
        spans = RecordSpans(self.consumer, [item for item, _ in decisions])
        uow = UnitOfWork(session, self.outbox, event_spans=spans.by_event_id())
        started = time.perf_counter()
        try:
            if events:
                self.batch.apply(cast(list[Envelope], events), uow)
        except Exception as exc:  # a handler failed: redo record by record, retrying
            spans.end_all(f"the slice's handler failed, redone record by record: {exc!r}")
            if is_transient(exc) and not self.passing(session, exc):
                raise  # the database went away: the whole batch is retried
            raise HandlerFailed(f"{type(exc).__name__}: {exc}") from exc
        took = time.perf_counter() - started  # the slice's, shared by its applied events
        if fast:
            done.count_applied(decoded)
            for traced in spans.started if spans.on else ():
                ended(traced, Action.APPLY, handler_seconds=took)
        else:
            for (item, decision), traced in zip(decisions, spans.started, strict=True):
                done.count(item, decision.action, decision.reason)
                applied = decision.action is Action.APPLY
                ended(
                    traced,
                    decision.action,
                    decision.reason,
                    handler_seconds=took if applied else None,
                )
        done.result.published.extend(uow.published)
        return done

    def one_by_one(
        self, session: Session, view: PartitionView, decoded: Sequence[Decoded]
    ) -> SliceOutcome:
        """Decide and apply record by record, each in its own savepoint with retries: a record
        whose handler keeps failing is parked, and the later records of its key behind it."""
        first = decoded[0].record
        done = SliceOutcome(BatchResult(first.topic, first.partition, view.watermark))
        decider = Decider(view, known_types=self.batch.event_types)
        spans = RecordSpans(self.consumer)
        for item in decoded:
            record = incoming(item, self.batch)
            decision = decider.decide(record)
            stopped((decision,))
            action, reason, attempts, took = decision.action, decision.reason, 1, None
            retry_in = None
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
                    if outcome.passing:  # waits for a delayed retry
                        retry_in = self.retry.next_delay(0, outcome.after)
                    decider.parked(record)  # later records of this key wait behind it
            done.count(item, action, reason, attempts, retry_in)
            ended(traced, action, reason, handler_seconds=took, attempts=attempts)
        return done

    def apply_one(
        self, session: Session, envelope: Envelope, span: TraceContext | None = None
    ) -> HandlerOutcome:
        """Run the handler for one event in a savepoint, retrying up to ``max_attempts`` times
        (``span``: the span applying it, which the events the handler publishes continue); a
        passing failure is not retried here but later (`HandlerOutcome.passing`)."""
        error = ""
        event_spans = {str(envelope.event_id): span} if span is not None else None
        for attempt in range(1, self.max_attempts + 1):
            uow = UnitOfWork(session, self.outbox, event_spans=event_spans)
            try:
                with session.begin_nested():
                    self.batch.apply([envelope], uow)
                return HandlerOutcome(attempt, None, tuple(uow.published))
            except Exception as exc:  # a failing handler is retried, then parked; never lost
                error = f"handler failed: {type(exc).__name__}: {exc}"
                if self.passing(session, exc):
                    log.warning("%s (retried later)", error)
                    return HandlerOutcome(attempt, error, passing=True, after=retry_after(exc))
                if is_transient(exc):  # not the event's fault: the batch is retried
                    raise
                log.warning("%s (attempt %d/%d)", error, attempt, self.max_attempts)
        return HandlerOutcome(self.max_attempts, error)

    def passing(self, session: Session, exc: BaseException) -> bool:
        """True when the handler's ``exc`` is retried later: the policy is on, calls it
        passing, and the session's connection is still usable. A lost connection (whatever
        the handler raised about it) is not the event's fault: the batch is retried instead,
        as before delayed retries existed."""
        if not self.retry.enabled or not self.retry.passing(exc):
            return False
        return not lost_connection(session, exc)


def lost_connection(session: Session, exc: BaseException) -> bool:
    """True when ``exc`` or its causes say the connection was invalidated, or the session's
    connection is gone (the savepoint's rollback failing on it raises instead)."""
    from sqlalchemy.exc import DBAPIError, DisconnectionError, InterfaceError

    for current in causes(exc):
        if isinstance(current, DBAPIError) and current.connection_invalidated:
            return True
        if isinstance(current, DisconnectionError | InterfaceError):
            return True
    try:
        connection = session.connection()
    except Exception:  # a session that cannot hand out its connection has lost it
        return True
    return connection.invalidated or connection.closed


# What every record of an `all_new` slice is decided (the offset is not read on that path).
_APPLY = Decision(-1, Action.APPLY)


def all_new(view: PartitionView, decoded: Sequence[Decoded], batch: BatchHandler) -> bool:
    """True when `Decider` would apply every record of ``decoded`` (records above the
    watermark, in offset order): each decoded, of a type the handler applies, its payload valid,
    its event id neither in the window nor twice in the slice, its key not parked. Checked with
    set operations, where the decider goes record by record; False sends the slice to it."""
    if decoded[0].record.offset <= view.watermark:
        return False
    if view.sources:
        for item in decoded:
            state = view.sources.get(item.source) if item.source is not None else None
            if state is None:
                if view.by_position:
                    return False  # the decider stops on it
                continue
            if item.position is None or item.position <= state.top:
                return False
            if state.lost is not None or state.pending:
                return False  # a restored database's histories: the decider tells them apart
    if view.replay_ids and not view.replay_ids.isdisjoint(item.event_id for item in decoded):
        return False  # applied again by a rewind: the decider says so
    ids = [item.event_id for item in decoded]
    if None in ids or len(set(ids)) != len(ids) or not view.recent_ids.isdisjoint(ids):
        return False
    if view.parked_keys and not view.parked_keys.isdisjoint(item.key for item in decoded):
        return False
    for item in decoded:
        envelope = item.envelope
        if envelope is None or item.refused is not None or not batch.handles(envelope.event_type):
            return False
        if batch.invalid(envelope) is not None:
            return False
    return True


def stopped(decisions: Iterable[Decision]) -> None:
    """Raise `OffsetsMoved` (the transaction rolls back) when a record stops the partition."""
    for decision in decisions:
        if decision.action is Action.STOP:
            raise OffsetsMoved(decision.reason, rebased=False)


def incoming(item: Decoded, batch: BatchHandler) -> Incoming:
    """What the decision needs of one decoded record (its payload checked by ``batch``)."""
    invalid = None if item.envelope is None else batch.invalid(item.envelope)
    record = item.record
    return Incoming(
        record.offset,
        item.key,
        item.event_id,
        item.event_type,
        item.problem,
        invalid,
        item.source,
        item.position,
        item.refused,
    )
