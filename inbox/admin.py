"""Operating an inbox: status, parked records, redrive (in key order) and explicit rewind."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from inbox.apply import Inbox
from inbox.tables import parked, recent_ids, watermarks
from outbox.record import KafkaRecord, UndecodableRecord, decode


@dataclass(frozen=True)
class RedriveResult:
    """What a redrive did: applied, skipped as already applied, still parked."""

    applied: int
    skipped: int
    still_parked: int


def status(engine: Engine, consumer: str | None = None) -> list[dict[str, Any]]:
    """One row per (consumer, topic, partition): watermark, window size, parked count."""
    window = (
        select(
            recent_ids.c.consumer,
            recent_ids.c.topic,
            recent_ids.c.partition,
            func.count().label("window"),
        )
        .group_by(recent_ids.c.consumer, recent_ids.c.topic, recent_ids.c.partition)
        .subquery()
    )
    waiting = (
        select(parked.c.consumer, parked.c.topic, parked.c.partition, func.count().label("parked"))
        .group_by(parked.c.consumer, parked.c.topic, parked.c.partition)
        .subquery()
    )
    query = (
        select(
            watermarks,
            func.coalesce(window.c.window, 0).label("window"),
            func.coalesce(waiting.c.parked, 0).label("parked"),
        )
        .outerjoin(
            window,
            (window.c.consumer == watermarks.c.consumer)
            & (window.c.topic == watermarks.c.topic)
            & (window.c.partition == watermarks.c.partition),
        )
        .outerjoin(
            waiting,
            (waiting.c.consumer == watermarks.c.consumer)
            & (waiting.c.topic == watermarks.c.topic)
            & (waiting.c.partition == watermarks.c.partition),
        )
        .order_by(watermarks.c.consumer, watermarks.c.topic, watermarks.c.partition)
    )
    if consumer:
        query = query.where(watermarks.c.consumer == consumer)
    with engine.connect() as conn:
        return [dict(row._mapping) for row in conn.execute(query)]


def list_parked(
    engine: Engine, consumer: str | None = None, limit: int = 100
) -> list[dict[str, Any]]:
    """Parked records, oldest first, without their payload bytes."""
    query = select(*(c for c in parked.c if c.name != "payload")).order_by(parked.c.id).limit(limit)
    if consumer:
        query = query.where(parked.c.consumer == consumer)
    with engine.connect() as conn:
        return [dict(row._mapping) for row in conn.execute(query)]


def redrive(inbox: Inbox, topic: str, partition: int, key: str | None = None) -> RedriveResult:
    """Apply a partition's parked records again, per key in offset order.

    A record that still fails stays parked (attempts and error updated) and keeps the later
    records of its key parked behind it. Runs under the partition's watermark lock, so it never
    interleaves with the apply loop.
    """
    applied = skipped = still = 0
    with Session(inbox.engine) as session, session.begin():
        inbox.lock_watermark(session, topic, partition)
        query = (
            select(parked).where(*inbox.match(parked, topic, partition)).order_by(parked.c.offset)
        )
        if key is not None:
            query = query.where(parked.c.key == key)
        rows = session.execute(query).all()
        ids = [r.event_id for r in rows if r.event_id]
        seen = set(inbox.recent(session, topic, partition, ids))
        blocked: set[str | None] = set()
        for row in rows:
            if row.key in blocked:
                still += 1
                continue
            if row.event_id in seen:
                session.execute(delete(parked).where(parked.c.id == row.id))
                skipped += 1
                continue
            error = _redrive_one(inbox, session, topic, row)
            if error is None:
                session.execute(delete(parked).where(parked.c.id == row.id))
                if row.event_id:
                    inbox.remember(session, topic, partition, row.event_id, row.offset)
                    seen.add(row.event_id)
                applied += 1
            else:
                session.execute(
                    update(parked)
                    .where(parked.c.id == row.id)
                    .values(error=error, attempts=parked.c.attempts + 1, last_seen=func.now())
                )
                blocked.add(row.key)
                still += 1
    return RedriveResult(applied=applied, skipped=skipped, still_parked=still)


def _redrive_one(inbox: Inbox, session: Session, topic: str, row: Any) -> str | None:
    headers = [(k, str(v).encode()) for k, v in (row.headers or {}).items()]
    record = KafkaRecord(
        topic,
        row.partition,
        row.offset,
        None if row.key is None else row.key.encode(),
        row.payload,
        headers,
    )
    try:
        envelope = decode(record.key, record.value, record.headers)
    except UndecodableRecord as exc:
        return f"undecodable: {exc}"
    if not inbox.handles(envelope.event_type):
        return f"unknown event type {envelope.event_type!r}"
    error, _ = inbox.apply_one(session, envelope)
    return error


def rewind(engine: Engine, consumer: str, topic: str, partition: int, offset: int) -> int:
    """Move a watermark back to ``offset`` explicitly (events above it will be applied again).

    The window's ids above ``offset`` are forgotten too, or the replay would be skipped as
    re-sends. Returns the previous watermark.
    """
    where = (
        watermarks.c.consumer == consumer,
        watermarks.c.topic == topic,
        watermarks.c.partition == partition,
    )
    with Session(engine) as session, session.begin():
        previous = session.execute(
            select(watermarks.c.offset).where(*where).with_for_update()
        ).scalar_one_or_none()
        if previous is None:
            raise ValueError(f"no watermark for {consumer} {topic}[{partition}]")
        session.execute(
            update(watermarks).where(*where).values(offset=offset, updated_at=func.now())
        )
        session.execute(
            delete(recent_ids).where(
                recent_ids.c.consumer == consumer,
                recent_ids.c.topic == topic,
                recent_ids.c.partition == partition,
                recent_ids.c.offset > offset,
            )
        )
    return int(previous)
