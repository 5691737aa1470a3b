"""Operating an inbox: status, parked records (list, show, skip), redrive (in key order) and
explicit rewind."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from inbox.apply import Inbox
from inbox.operations import list_parked, parked_record, rewind, show, skip, status
from inbox.slice import HandlerOutcome
from kernel.envelope import Envelope
from kernel.wire.record import read

__all__ = ["RedriveResult", "list_parked", "redrive", "rewind", "show", "skip", "status"]


@dataclass(frozen=True)
class RedriveResult:
    """What a redrive did: applied, skipped as already applied, still parked."""

    applied: int
    skipped: int
    still_parked: int


def redrive(inbox: Inbox, topic: str, partition: int, key: str | None = None) -> RedriveResult:
    """Apply a partition's parked records again, per key in offset order.

    A record that still fails stays parked (attempts and error updated) and keeps the later
    records of its key parked behind it. Runs under the partition's watermark lock, so it never
    interleaves with the apply loop.
    """
    applied = skipped = still = 0
    recorder = inbox.recorder
    published: list[Envelope] = []
    with Session(inbox.engine) as session, session.begin():
        recorder.lock(session, topic, partition)
        rows = recorder.parked_rows(session, topic, partition, key)
        seen = set(recorder.recent(session, topic, partition, (r.event_id for r in rows)))
        blocked: set[bytes | None] = set()  # raw keys
        for row in rows:
            if row.raw_key in blocked:
                still += 1
                continue
            if row.event_id in seen:
                recorder.unpark(session, row.id)
                skipped += 1
                continue
            outcome = _redrive_one(inbox, session, topic, row)
            if outcome.ok:
                recorder.unpark(session, row.id)
                if row.event_id:
                    applied_now = [(row.event_id, row.offset)]
                    recorder.remember(session, topic, partition, applied_now)
                    recorder.append_ledger(session, topic, partition, applied_now)
                    seen.add(row.event_id)
                published.extend(outcome.published)
                applied += 1
            else:
                recorder.still_failing(session, row.id, str(outcome.error))
                blocked.add(row.raw_key)
                still += 1
        recorder.recheck_parked(session, topic, partition)
    if published and inbox.on_published is not None:
        inbox.on_published(published)
    return RedriveResult(applied=applied, skipped=skipped, still_parked=still)


def _redrive_one(inbox: Inbox, session: Session, topic: str, row: Any) -> HandlerOutcome:
    decoded = read(parked_record(row))
    if decoded.envelope is None:
        return HandlerOutcome(0, f"undecodable: {decoded.problem}")
    if not inbox.handles(decoded.envelope.event_type):
        return HandlerOutcome(0, f"unknown event type {decoded.envelope.event_type!r}")
    invalid = inbox.batch.invalid(decoded.envelope)
    if invalid is not None:
        return HandlerOutcome(0, f"invalid payload: {invalid}")
    return inbox.slices.apply_one(session, decoded.envelope)
