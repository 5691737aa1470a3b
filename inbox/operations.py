"""Reading and moving every consumer's inbox rows, for operators and metrics: status, parked
records, watermarks, explicit rewind."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, Connection, and_, delete, func, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from inbox.recorder import Recorder
from inbox.tables import parked, recent_ids, watermarks


def status(engine: Engine, consumer: str | None = None) -> list[dict[str, Any]]:
    """One row per (consumer, topic, partition): watermark, window size (ids), parked count."""
    keys = ("consumer", "topic", "partition")
    ids = func.sum(func.cardinality(recent_ids.c.event_ids))
    window = (
        select(*(recent_ids.c[k] for k in keys), ids.label("window"))
        .group_by(*(recent_ids.c[k] for k in keys))
        .subquery()
    )
    waiting = (
        select(*(parked.c[k] for k in keys), func.count().label("parked"))
        .group_by(*(parked.c[k] for k in keys))
        .subquery()
    )

    def same(sub: Any) -> ColumnElement[bool]:
        return and_(*(sub.c[k] == watermarks.c[k] for k in keys))

    query = (
        select(
            watermarks,
            func.coalesce(window.c.window, 0).label("window"),
            func.coalesce(waiting.c.parked, 0).label("parked"),
        )
        .outerjoin(window, same(window))
        .outerjoin(waiting, same(waiting))
        .order_by(*(watermarks.c[k] for k in keys))
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


def watermark_rows(conn: Connection, consumers: Sequence[str]) -> list[tuple[str, str, int, int]]:
    """(consumer, topic, partition, watermark) of ``consumers`` (all when empty)."""
    query = select(
        watermarks.c.consumer, watermarks.c.topic, watermarks.c.partition, watermarks.c.offset
    )
    if consumers:
        query = query.where(watermarks.c.consumer.in_(consumers))
    return [(c, t, int(p), int(o)) for c, t, p, o in conn.execute(query).all()]


def parked_counts(conn: Connection, consumers: Sequence[str]) -> dict[str, int]:
    """Parked records per consumer of ``consumers`` (all when empty)."""
    query = select(parked.c.consumer, func.count()).group_by(parked.c.consumer)
    if consumers:
        query = query.where(parked.c.consumer.in_(consumers))
    return {c: int(n) for c, n in conn.execute(query).all()}


def rewind(engine: Engine, consumer: str, topic: str, partition: int, offset: int) -> int:
    """Move a watermark back to ``offset`` explicitly (events above it will be applied again).

    The window's ids above ``offset`` are forgotten too, or the replay would be skipped as
    re-sends: slices above it are deleted, a slice straddling it keeps its ids up to
    ``offset``. Returns the previous watermark."""
    recorder = Recorder(consumer)
    with Session(engine) as session, session.begin():
        previous = session.execute(
            select(watermarks.c.offset)
            .where(*recorder.match(watermarks, topic, partition))
            .with_for_update()
        ).scalar_one_or_none()
        if previous is None:
            raise ValueError(f"no watermark for {consumer} {topic}[{partition}]")
        session.execute(
            update(watermarks)
            .where(*recorder.match(watermarks, topic, partition))
            .values(offset=offset, updated_at=func.now())
        )
        _forget_above(session, recorder.match(recent_ids, topic, partition), offset)
    return int(previous)


def _forget_above(session: Session, scope: Sequence[ColumnElement[bool]], offset: int) -> None:
    """Delete the window's slices above ``offset`` and trim one straddling it to the ids at or
    below it (one partition's rows, under its watermark lock)."""
    session.execute(delete(recent_ids).where(*scope, recent_ids.c.first_offset > offset))
    straddling = session.execute(
        select(recent_ids.c.first_offset, recent_ids.c.event_ids, recent_ids.c.offsets).where(
            *scope, recent_ids.c.last_offset > offset
        )
    ).all()
    for first, event_ids, offsets in straddling:  # first <= offset: at least one id stays
        kept = [(e, o) for e, o in zip(event_ids, offsets, strict=True) if o <= offset]
        session.execute(
            update(recent_ids)
            .where(*scope, recent_ids.c.first_offset == first)
            .values(
                last_offset=max(o for _, o in kept),
                event_ids=[e for e, _ in kept],
                offsets=[o for _, o in kept],
            )
        )


def parked_headers(row: Any) -> list[tuple[str, bytes]]:
    """A parked row's headers back as Kafka headers (stored as text)."""
    return [(k, str(v).encode()) for k, v in (row.headers or {}).items()]
