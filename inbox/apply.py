"""The apply loop's entry point: one partition's ordered records in ONE transaction on the
consumer's database, exactly once per event.

`Inbox.apply_partition` tries the slice at once (`inbox.slice`), then, should a handler raise,
record by record in a new transaction (a savepoint each), then record by record with constraints
checked at each statement, and as a last resort parks every new record with the reason; the
handlers' API is in `inbox.handlers`."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from inbox import moves
from inbox.decision import Action, Decider, PartitionView
from inbox.handlers import BatchHandler, Handlers, as_batch
from inbox.judgement import advanced, claimed_below
from inbox.position import (
    OffsetsMoved,
    Superseded,
    TopicIdentity,
    judge_identity,
    source_keys,
)
from inbox.publishers import Publishers
from inbox.recorder import Locked, Recorder
from inbox.retries import RetryPolicy
from inbox.slice import (
    BatchResult,
    HandlerFailed,
    SliceApplier,
    SliceOutcome,
    incoming,
    stopped,
)
from inbox.states import losts_changed
from inbox.stops import unclaimed
from outbox.publish import Outbox
from outbox.unit import PublishedObserver
from outboxkit.kernel.errors import is_transient
from outboxkit.kernel.wire.position import Position
from outboxkit.kernel.wire.record import Decoded, KafkaRecord

__all__ = ["DEFAULT_MAX_ATTEMPTS", "DEFAULT_WINDOW", "EXACTLY_ONCE_WINDOW", "Inbox"]

log = logging.getLogger(__name__)

DEFAULT_MAX_ATTEMPTS = 3  # runs of a failing handler before its record is parked
DEFAULT_WINDOW = 50_000  # offsets per partition; Debezium re-sends measured in the hundreds
# The window of a topic Debezium writes through an exactly-once Connect worker (KIP-618). KIP-618
# makes Connect's records and source offsets one Kafka transaction, but Debezium itself, resuming
# after a lost database connection or a task restart, looks for its place in the WAL again
# (WalPositionLocator) and can emit events it had already committed: 2 events applied twice
# after a Postgres crash in CI. Those re-sends repeat the database transaction around the stored
# position and follow their originals with nothing committed in between (only aborted records
# and markers), so they land within one source transaction's events and one poll batch of them.
EXACTLY_ONCE_WINDOW = 10_000


@dataclass(frozen=True)
class Inbox:
    """Applies records for one consumer through its handlers, exactly once per event.

    Attributes:
        engine: The consumer's database: its inbox tables and the handlers' own.
        consumer: The consumer's name; its watermarks, recent ids and parked records are kept
            under it.
        handlers: One ``handler(event, uow)`` for every type, a mapping of event type to
            handler, or a `BatchHandler`.
        window: Offsets of applied event ids kept per partition against re-sends; 0 keeps
            none: the watermark alone, exact only for a producer that never writes an event
            twice.
        max_attempts: Runs of a failing handler before its record is parked (a passing failure,
            see ``retry``, is not run again at once but later).
        retry: When a record whose handler failed for a passing reason (`inbox.RetryLater`, a
            timeout, a lock or serialization conflict) is retried: it waits parked, holding its
            key, until `inbox.retry_due` redrives it (the consumer driver does every second);
            ``RetryPolicy(attempts=0)`` parks every failure for a person.
        optimistic: The slice through the batch handler at once; when a handler raises, the
            transaction is rolled back and the slice redone record by record in a new one (a
            savepoint per record). False: record by record from the start (two more round trips
            per record).
        outbox: How the handlers' events are written (the consuming service's outbox).
        on_published: Told what the handlers published once the partition's transaction
            committed.
        ledger: Append every applied event to the ledger (`outboxkit audit`); grows with the
            message count.
        publishers: Who may publish each aggregate type (`inbox.publishers`): a record of
            another source is parked with the reason; empty: any source.
    """

    engine: Engine
    consumer: str
    handlers: Handlers
    window: int = DEFAULT_WINDOW
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    optimistic: bool = True
    outbox: Outbox = field(default_factory=Outbox)
    on_published: PublishedObserver | None = None
    ledger: bool = False
    publishers: Publishers = field(default_factory=Publishers)

    @property
    def recorder(self) -> Recorder:
        """This consumer's inbox rows."""
        return Recorder(self.consumer, self.window, self.ledger)

    @cached_property
    def batch(self) -> BatchHandler:
        """The handlers as one batch handler (the one-event API wrapped)."""
        return as_batch(self.handlers)

    @cached_property
    def slices(self) -> SliceApplier:
        """What applies this consumer's decided slices."""
        return SliceApplier(self.consumer, self.batch, self.outbox, self.max_attempts, self.retry)

    def handles(self, event_type: str) -> bool:
        """True when a handler exists for ``event_type``.

        Args:
            event_type: An event's type.
        """
        return self.batch.handles(event_type)

    def apply_partition(
        self,
        records: Sequence[KafkaRecord],
        identity: TopicIdentity | None = None,
        epoch: int | None = None,
    ) -> BatchResult:
        """Decide and apply one partition's records, advance its watermark, commit.

        When the offsets changed meaning, the partition stops, with the reason, and
        `OffsetsMoved` is raised: nothing of the slice is applied or skipped. A stopped partition
        raises it until it is started over (`inbox.moves.start_over`: by the consumer driver when
        its sources' positions can take over, else by an operator).

        The bookkeeping takes a constant number of statements whatever the slice's size: lock
        and read the watermark, the window's ids of the slice (and its parked keys when the
        partition has parked records), then write the parked records (when any) and the new
        watermark with the applied ids in one statement each.

        No record's bytes can stop the partition: a record that cannot be decoded or applied is
        parked, and should the partition's transaction fail anyway on something in the data
        (not on an unreachable database, which is raised for the caller to retry), it is redone
        record by record, and as a last resort every new record of the slice is parked with its
        raw bytes and the reason, so the records behind it move on.

        Args:
            records: Records of ONE topic partition, in any order (sorted by offset here).
            identity: What the records' offsets refer to (their cluster and topic), checked
                against the watermark's (`inbox.position.judge_identity`); None skips the check.
            epoch: The partition's start-over count when the caller's reader started (None: not
                checked); a partition started over since raises `Superseded`, and nothing is
                applied.

        Raises:
            OffsetsMoved: The records' offsets changed meaning; the partition is stopped.
        """
        if not records:
            raise ValueError("apply_partition needs at least one record")
        topic, partition = records[0].topic, records[0].partition
        if any((r.topic, r.partition) != (topic, partition) for r in records):
            raise ValueError("apply_partition takes the records of ONE topic partition")
        ordered = sorted(records, key=lambda r: r.offset)
        attempts: list[Callable[[Sequence[KafkaRecord]], BatchResult]] = [
            lambda rs: self._transaction(rs, identity, epoch, optimistic=False),
            lambda rs: self._transaction(rs, identity, epoch, optimistic=False, immediate=True),
        ]
        if self.optimistic:
            attempts.insert(0, lambda rs: self._transaction(rs, identity, epoch, optimistic=True))
        error: Exception | None = None
        for attempt in attempts:
            try:
                return attempt(ordered)
            except HandlerFailed as exc:  # rolled back: redone record by record
                log.info("%s[%d]: per-record apply after %s", topic, partition, exc)
            except OffsetsMoved as moved:  # rolled back: nothing applied, nothing skipped
                if not isinstance(moved, Superseded):
                    self._stop(topic, partition, moved)
                raise
            except Exception as exc:
                if is_transient(exc):
                    raise
                error = exc
                log.exception("%s[%d]: the partition's transaction failed", topic, partition)
        assert error is not None  # only the first attempt raises HandlerFailed, and others follow
        reason = f"the inbox transaction failed: {_describe(error)}"
        try:
            return self._park_all(ordered, reason, identity, epoch)
        except OffsetsMoved as moved:
            if not isinstance(moved, Superseded):
                self._stop(topic, partition, moved)
            raise

    def _transaction(
        self,
        records: Sequence[KafkaRecord],
        identity: TopicIdentity | None,
        epoch: int | None,
        *,
        optimistic: bool,
        immediate: bool = False,
    ) -> BatchResult:
        """One try at the slice in one transaction. Records above the watermark are decoded;
        those at or below it (a replay) only when the sources' positions or the window can
        judge them (`Decider`), else they are counted as replays undecoded.
        ``immediate``: deferred constraints are checked at each statement, inside the record's
        savepoint, so a record breaking one is parked instead of failing the commit."""
        topic, partition = records[0].topic, records[0].partition
        recorder = self.recorder
        with Session(self.engine) as session, session.begin():
            if immediate:
                session.execute(text("SET CONSTRAINTS ALL IMMEDIATE"))
            locked = recorder.locked(session, topic, partition)
            check(locked, identity, epoch)
            mark = locked.offset
            judged = self.window or locked.sources  # replays that can prove otherwise
            taken = records if judged else [r for r in records if r.offset > mark]
            decoded = [self.publishers.read(r) for r in taken]
            decoded, identities = keyed(decoded, locked.identities)
            check_claims(locked, identities, decoded)
            replays = len(records) - len(decoded)
            if not decoded:
                return BatchResult(topic, partition, mark, {Action.SKIP_REPLAY: replays})
            view = self._view(session, locked, decoded)
            slices = self.slices
            if optimistic:
                done = slices.optimistic(session, view, decoded)
            else:
                done = slices.one_by_one(session, view, decoded)
            sources = advanced(
                locked.sources,
                # not those skipped by offset alone: nothing judged their positions
                (
                    (d.source, d.position, d.event_id)
                    for d in decoded
                    if d.record.offset > mark or d.source in locked.sources
                ),
            )
            replay_ids = still_replayed(locked, decoded)
            moved_on = done.applied or done.parked or done.result.watermark != mark
            # A slice of replays only writes nothing: a write would make every attempt still
            # waiting on the lock under repeatable read or serializable fail once more.
            adopt = identity is not None and identity != locked.identity
            learnt = identities != locked.identities
            replay_moved = replay_ids != locked.replay_ids
            if moved_on or adopt or learnt or replay_moved or sources != locked.sources:
                recorder.park(session, done.parked, identity.topic_id if identity else None)
                recorder.append_ledger(session, topic, partition, done.applied)
                recorder.advance(
                    session,
                    topic,
                    partition,
                    done.result.watermark,
                    # Offsets at or below the watermark (new events by position at a topic's
                    # restarted offsets, for a caller that gave no identity) may have a window
                    # row already: only the slice's offsets above it are remembered.
                    [pair for pair in done.applied if pair[1] > mark],
                    sources=sources,
                    identity=identity,
                    identities=identities if learnt else None,
                    replay_ids=replay_ids if replay_moved else None,
                    lost=losts_changed(locked.sources, sources),
                )
        result = done.result
        if replays:
            result.counts[Action.SKIP_REPLAY] = result.count(Action.SKIP_REPLAY) + replays
        if result.published and self.on_published is not None:
            self.on_published(result.published)
        return result

    def _view(self, session: Session, locked: Locked, decoded: Sequence[Decoded]) -> PartitionView:
        return self.recorder.view(session, locked, decoded, ids_kept=self.window > 0)

    def _stop(self, topic: str, partition: int, moved: OffsetsMoved) -> None:
        """Record why the partition stopped, in a transaction of its own (the slice's was rolled
        back); a partition already stopped keeps its first reason."""
        recorder = self.recorder
        with Session(self.engine) as session, session.begin():
            if recorder.locked(session, topic, partition).stopped is None:
                moves.stop(session, self.consumer, topic, partition, moved.reason)
        log.error("%s[%d] stopped: %s", topic, partition, moved.reason)

    def _park_all(
        self,
        records: Sequence[KafkaRecord],
        reason: str,
        identity: TopicIdentity | None,
        epoch: int | None,
    ) -> BatchResult:
        """The last resort: park every record above the watermark, raw bytes and reason, and
        move the watermark past them (redrive applies them once the cause is fixed)."""
        topic, partition = records[0].topic, records[0].partition
        recorder = self.recorder
        with Session(self.engine) as session, session.begin():
            locked = recorder.locked(session, topic, partition)
            check(locked, identity, epoch)  # nothing of it is parked
            mark = locked.offset
            fresh, identities = keyed(
                [self.publishers.read(r) for r in records if r.offset > mark], locked.identities
            )
            check_claims(locked, identities, fresh)
            done = SliceOutcome(BatchResult(topic, partition, mark))
            # Judged first, so a re-send or a re-read in the slice is skipped, not parked (its
            # redrive would apply it again): only what the judgement takes for new is parked.
            decider = Decider(self._view(session, locked, fresh)) if fresh else None
            for item in fresh:
                assert decider is not None
                decision = decider.decide(incoming(item, self.batch))
                stopped((decision,))
                if decision.action in (Action.SKIP_REPLAY, Action.SKIP_DUPLICATE):
                    done.count(item, decision.action, decision.reason)
                else:  # for a person: the data's fault
                    done.count(item, Action.PARK, reason, 0)
            recorder.park(session, done.parked, identity.topic_id if identity else None)
            sources = advanced(locked.sources, ((d.source, d.position, d.event_id) for d in fresh))
            recorder.advance(
                session,
                topic,
                partition,
                done.result.watermark,
                sources=sources,
                identity=identity,
                identities=identities,
                replay_ids=still_replayed(locked, fresh),
                lost=losts_changed(locked.sources, sources),
            )
        result = done.result
        if len(fresh) < len(records):
            result.counts[Action.SKIP_REPLAY] = len(records) - len(fresh)
        parked_now = len(done.parked)
        log.error("%s[%d]: %d records parked: %s", topic, partition, parked_now, reason)
        return result


def keyed(
    decoded: list[Decoded], identities: Mapping[str, str]
) -> tuple[list[Decoded], dict[str, str]]:
    """``decoded`` with each record's source replaced by the key its position is kept under
    (`inbox.position.source_keys`: another database under a known name is a source of its
    own), and the partition's source identities after them."""
    seen = {(d.source, d.origin) for d in decoded}  # the common slice: one known pair
    if all(origin is None or identities.get(str(source)) == origin for source, origin in seen):
        return decoded, dict(identities)
    keys, learnt = source_keys(((d.source, d.origin) for d in decoded), identities)
    return [
        d if k == d.source else d._replace(source=k) for d, k in zip(decoded, keys, strict=True)
    ], learnt


def check_claims(locked: Locked, identities: Mapping[str, str], decoded: Sequence[Decoded]) -> None:
    """Raise `OffsetsMoved` when a database claims a source's positions stored without identity
    with a record at or below them (`inbox.judgement.claimed_below`)."""
    if identities == locked.identities:
        return
    first_seen: dict[str, Position | None] = {}
    for d in decoded:
        if d.source is not None:
            first_seen.setdefault(d.source, d.position)
    key = claimed_below(locked.sources, locked.identities, identities, first_seen)
    if key is not None:
        raise OffsetsMoved(unclaimed(key, identities[key]), rebased=False)


def still_replayed(locked: Locked, decoded: Sequence[Decoded]) -> frozenset[str]:
    """The events a rewind still applies again once ``decoded`` was decided."""
    if not locked.replay_ids:
        return locked.replay_ids
    return locked.replay_ids - {d.event_id for d in decoded if d.record.offset > locked.offset}


def check(locked: Locked, identity: TopicIdentity | None, epoch: int | None) -> None:
    """Raise `OffsetsMoved` when the locked partition must not take the slice: stopped,
    started over since the caller's reader started (`Superseded`), or of another identity."""
    if epoch is not None and locked.epoch != epoch:
        raise Superseded(
            f"started over (epoch {locked.epoch}) after this reader started (epoch {epoch})"
        )
    if locked.stopped is not None:
        raise OffsetsMoved(locked.stopped, rebased=False)
    moved = judge_identity(locked.identity, identity, locked.positions)
    if moved is not None:
        raise moved


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
