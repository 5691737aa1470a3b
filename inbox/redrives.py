"""Parked records applied again: by a person (`redrive`, a partition's or a key's parked
records) or by the retrier (`retry_due`, the keys whose first parked record waits for a delayed
retry that is due). Both hold the partition's watermark lock, so they never interleave with the
apply loop or with each other, and both go through a key's parked records in offset order: the
first that fails again stays parked (with its next retry, or for a person) and holds the rest."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from inbox.parked_rows import parked_record
from inbox.retries import retries_made
from inbox.slice import HandlerOutcome
from outboxkit.kernel.envelope import Envelope

if TYPE_CHECKING:
    from inbox.apply import Inbox

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RedriveResult:
    """What a redrive (or a pass of the retrier) did: applied, skipped as already applied,
    still parked.

    Attributes:
        applied: Parked records the handlers applied this time (now unparked).
        skipped: Parked records already applied (their event id in the window), unparked.
        still_parked: Records that failed again, or wait behind a failing record of their key.
        retrying: Of the records that failed again, those waiting for a delayed retry (the
            others are parked for a person).
    """

    applied: int
    skipped: int
    still_parked: int
    retrying: int = 0

    def __add__(self, other: RedriveResult) -> RedriveResult:
        return RedriveResult(
            self.applied + other.applied,
            self.skipped + other.skipped,
            self.still_parked + other.still_parked,
            self.retrying + other.retrying,
        )


NOTHING = RedriveResult(0, 0, 0)


def redrive(inbox: Inbox, topic: str, partition: int, key: str | None = None) -> RedriveResult:
    """Apply a partition's parked records again, per key in offset order.

    A record that still fails stays parked (attempts, error and history updated): after a
    passing failure it waits for a delayed retry (`inbox.RetryPolicy`, counted again from the
    first), else it is parked for a person; either way it keeps the later records of its key
    parked behind it. Runs under the partition's watermark lock, so it never interleaves with
    the apply loop.

    Args:
        inbox: The consumer's inbox, with the handlers that apply the records now.
        topic: The topic of the partition whose parked records are redriven.
        partition: The partition whose parked records are redriven.
        key: Redrive only this record key's parked records (all keys when None).
    """
    with Session(inbox.engine) as session, session.begin():
        inbox.recorder.lock(session, topic, partition)
        at = session.execute(select(func.now())).scalar_one()
        rows = inbox.recorder.parked_rows(session, topic, partition, key)
        done = _Pass(inbox, session, topic, partition, at).run(rows)
        inbox.recorder.recheck_parked(session, topic, partition)
    return done.told(inbox)


def to_redrive(inbox: Inbox, topic: str, partition: int, key: str | None = None) -> list[Any]:
    """The parked records `redrive` would apply again, in its order (read without the
    partition's lock, nothing changed: a dry run's list, which the consumer may change)."""
    with Session(inbox.engine) as session:
        return list(inbox.recorder.parked_rows(session, topic, partition, key))


def retry_due(inbox: Inbox, now: datetime | None = None) -> RedriveResult:
    """Redrive, per partition in one transaction each, every key of ``inbox``'s consumer whose
    first parked record waits for a delayed retry that is due: its records in offset order,
    with the same rules as `redrive`. A record that fails again for a passing reason waits for
    its next retry; once the policy is spent, or on another failure, it is parked for a person.

    Args:
        inbox: The consumer's inbox, with its handlers and retry policy.
        now: The time (timezone-aware) to retry by and to reckon the next retries from; None:
            the database's clock (a test harness passes a later time instead of waiting).
    """
    with inbox.engine.connect() as conn:
        partitions = inbox.recorder.due_partitions(conn, now)
    total = NOTHING
    for topic, partition in partitions:
        total += _retry_partition(inbox, topic, partition, now)
    return total


def _retry_partition(
    inbox: Inbox, topic: str, partition: int, now: datetime | None
) -> RedriveResult:
    """`retry_due` for one partition, under its lock: what another retrier (or a person) did
    first is not due any more when read again here."""
    recorder = inbox.recorder
    with Session(inbox.engine) as session, session.begin():
        recorder.lock(session, topic, partition)
        at = now or session.execute(select(func.now())).scalar_one()
        keys: list[Sequence[Any]] = []
        seen: set[bytes] = set()
        for row in recorder.due(session, at, topic, partition):
            if row.raw_key is None:  # a null key holds nothing: the record alone
                keys.append([row])
            elif row.raw_key not in seen:
                seen.add(row.raw_key)
                rows = recorder.key_rows(session, topic, partition, row.raw_key)
                if rows and rows[0].id == row.id:  # nothing before it waits for a person
                    keys.append(rows)
        done = _Pass(inbox, session, topic, partition, at)
        for rows in keys:
            done.run(rows)
        recorder.recheck_parked(session, topic, partition)
    return done.told(inbox)


@dataclass
class _Pass:
    """One transaction's redrive of parked records of one partition, under its lock."""

    inbox: Inbox
    session: Session
    topic: str
    partition: int
    at: datetime
    result: RedriveResult = NOTHING
    published: list[Envelope] = field(default_factory=list)

    def run(self, rows: Sequence[Any]) -> _Pass:
        """Apply ``rows`` (parked records in the order they were parked) again: per key, the
        first that fails stays parked and holds the later ones."""
        recorder, session = self.inbox.recorder, self.session
        topic, partition = self.topic, self.partition
        ids = (r.event_id for r in rows)
        seen = set(recorder.recent(session, topic, partition, ids))
        blocked: set[bytes] = set()  # raw keys
        applied = skipped = still = retrying = 0
        for row in rows:
            if row.raw_key is not None and row.raw_key in blocked:
                still += 1
            elif row.event_id in seen:
                recorder.unpark(session, row.id)
                skipped += 1
            else:
                outcome = _redrive_one(self.inbox, session, row)
                if outcome.ok:
                    self._applied(row, outcome)
                    seen.add(row.event_id)
                    applied += 1
                else:
                    retrying += self._failed(row, outcome)
                    if row.raw_key is not None:
                        blocked.add(row.raw_key)
                    still += 1
        self.result += RedriveResult(applied, skipped, still, retrying)
        return self

    def _applied(self, row: Any, outcome: HandlerOutcome) -> None:
        recorder, session = self.inbox.recorder, self.session
        recorder.unpark(session, row.id)
        if row.event_id:
            applied_now = [(row.event_id, row.offset)]
            recorder.remember_redriven(
                session, self.topic, self.partition, row.event_id, row.offset
            )
            recorder.append_ledger(session, self.topic, self.partition, applied_now)
        self.published.extend(outcome.published)

    def _failed(self, row: Any, outcome: HandlerOutcome) -> bool:
        """Record the failure; True when the record waits for a delayed retry."""
        error, retry_in = str(outcome.error), None
        if outcome.passing:
            retried = retries_made(row.history)
            retry_in = self.inbox.retry.next_delay(retried, outcome.after)
            if retry_in is None:
                error = f"retries exhausted after {retried} delayed retries: {error}"
                log.warning("%s[%d] offset %d: %s", self.topic, self.partition, row.offset, error)
        self.inbox.recorder.still_failing(
            self.session,
            row.id,
            error,
            at=self.at,
            attempts=max(outcome.attempts, 1),
            retry_in=retry_in,
        )
        return retry_in is not None

    def told(self, inbox: Inbox) -> RedriveResult:
        """The result, once the transaction committed: what the handlers published told."""
        if self.published and inbox.on_published is not None:
            inbox.on_published(self.published)
        return self.result


def _redrive_one(inbox: Inbox, session: Session, row: Any) -> HandlerOutcome:
    decoded = inbox.publishers.read(parked_record(row))
    if decoded.envelope is None:
        return HandlerOutcome(0, f"undecodable: {decoded.problem}")
    if decoded.refused is not None:
        return HandlerOutcome(0, f"refused: {decoded.refused}")
    if not inbox.handles(decoded.envelope.event_type):
        return HandlerOutcome(0, f"unknown event type {decoded.envelope.event_type!r}")
    invalid = inbox.batch.invalid(decoded.envelope)
    if invalid is not None:
        return HandlerOutcome(0, f"invalid payload: {invalid}")
    return inbox.slices.apply_one(session, decoded.envelope)
