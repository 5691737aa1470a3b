"""The inbox's bookkeeping SQL, in one place: watermarks, the window of recent event ids, and
parked records. The apply loop, the operator commands, the metrics and the consumer runner all
read and write the inbox tables through here."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Table,
    and_,
    bindparam,
    column,
    delete,
    func,
    insert,
    select,
    true,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY, UUID
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Engine, Row
from sqlalchemy.orm import Session

from inbox.decision import prune_floor
from inbox.tables import parked, recent_ids, watermarks
from outbox.record import Decoded, header_map

Executor = Session | Connection
EVENT_ID = UUID(as_uuid=False)  # an event id as the window holds it, read and bound as str


@dataclass(frozen=True)
class Recorder:
    """One consumer's inbox rows. ``window``: offsets per partition over which applied event ids
    are kept against re-sends (0: none, the watermark alone)."""

    consumer: str
    window: int = 0

    def match(self, table: Table, topic: str, partition: int) -> tuple[ColumnElement[bool], ...]:
        """Filter of ``table`` to this consumer's rows of one topic partition."""
        return (
            table.c.consumer == self.consumer,
            table.c.topic == topic,
            table.c.partition == partition,
        )

    # -- watermark ---------------------------------------------------------------------------
    def lock(self, session: Session, topic: str, partition: int) -> int:
        """The partition's watermark (-1 before the first record), row-locked until commit.

        The lock serialises every instance of this consumer on this partition: a second instance
        waits here, then sees the advanced watermark and skips what was applied. One round trip
        once the row exists (every batch but the partition's first)."""
        locked = select(watermarks.c.offset).where(*self.match(watermarks, topic, partition))
        mark = session.execute(locked.with_for_update()).scalar_one_or_none()
        if mark is None:
            session.execute(
                pg_insert(watermarks)
                .values(consumer=self.consumer, topic=topic, partition=partition, offset=-1)
                .on_conflict_do_nothing()
            )
            mark = session.execute(locked.with_for_update()).scalar_one()
        return int(mark)

    def advance(self, session: Session, topic: str, partition: int, offset: int) -> None:
        """Set the (locked) watermark and forget the window's slices below the new floor.

        A slice is forgotten whole once its last offset falls below the floor; one straddling
        the floor stays whole, so the window may keep up to a slice more than ``window``
        offsets (never fewer)."""
        session.execute(
            update(watermarks)
            .where(*self.match(watermarks, topic, partition))
            .values(offset=offset, updated_at=func.now())
        )
        if self.window:
            session.execute(
                delete(recent_ids).where(
                    *self.match(recent_ids, topic, partition),
                    recent_ids.c.last_offset < prune_floor(offset, self.window),
                )
            )

    def positions(self, conn: Executor, topics: Sequence[str]) -> dict[tuple[str, int], int]:
        """Next offset to read per (topic, partition) of ``topics`` (watermark + 1)."""
        rows = conn.execute(
            select(watermarks.c.topic, watermarks.c.partition, watermarks.c.offset).where(
                watermarks.c.consumer == self.consumer, watermarks.c.topic.in_(topics)
            )
        ).all()
        return {(t, int(p)): int(o) + 1 for t, p, o in rows}

    # -- window of recent event ids ------------------------------------------------------------
    # Callers hold the partition's watermark lock (`lock`): it serialises every reader and
    # writer of the window, which is what keeps an id from being applied twice (see tables.py).
    def recent(
        self, session: Session, topic: str, partition: int, ids: Iterable[str | None]
    ) -> frozenset[str]:
        """Which of ``ids`` were applied within the window, in one statement: the partition's
        slices unnested, joined with the wanted ids (one array parameter, a hash join)."""
        # Only ids in canonical UUID form were ever remembered (applied records decoded).
        wanted = sorted({i for i in ids if i and _is_uuid(i)})
        if not wanted or not self.window:
            return frozenset()
        unnest_held = func.unnest(recent_ids.c.event_ids).table_valued(column("event_id", EVENT_ID))
        held = unnest_held.render_derived("held").lateral()
        unnest_asked = func.unnest(bindparam("wanted", wanted, type_=ARRAY(EVENT_ID)))
        asked = unnest_asked.table_valued(column("event_id", EVENT_ID)).render_derived("asked")
        rows = session.execute(
            select(asked.c.event_id)
            .select_from(recent_ids)
            .join(held, true())
            .join(asked, asked.c.event_id == held.c.event_id)
            .where(*self.match(recent_ids, topic, partition))
        )
        return frozenset(r[0] for r in rows)

    def remember(
        self, session: Session, topic: str, partition: int, applied: Sequence[tuple[str, int]]
    ) -> None:
        """Record a slice's applied (event id, offset) pairs as one window row (nothing when the
        window is 0 or nothing was applied). An id twice in one slice aborts the transaction:
        the decision let a duplicate effect through (so does an id that is not a UUID)."""
        if not self.window or not applied:
            return
        pairs = sorted(applied, key=lambda pair: pair[1])
        event_ids = [event_id for event_id, _ in pairs]
        if len(set(event_ids)) != len(event_ids):
            raise ValueError(f"{topic}[{partition}]: an event id applied twice in one slice")
        session.execute(
            insert(recent_ids).values(
                consumer=self.consumer,
                topic=topic,
                partition=partition,
                first_offset=pairs[0][1],
                last_offset=pairs[-1][1],
                event_ids=event_ids,
                offsets=[offset for _, offset in pairs],
            )
        )

    # -- parked records ------------------------------------------------------------------------
    def parked_keys(
        self, session: Session, topic: str, partition: int, keys: Iterable[str | None]
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

    def park(self, session: Session, records: Sequence[tuple[Decoded, str, int]]) -> None:
        """Keep records that were not applied, each with why and after how many attempts, in one
        statement (once per offset)."""
        if not records:
            return
        rows = [
            {
                "consumer": self.consumer,
                "topic": decoded.record.topic,
                "partition": decoded.record.partition,
                "offset": decoded.record.offset,
                "key": decoded.key,
                "event_id": decoded.event_id,
                "event_type": decoded.event_type,
                "headers": header_map(decoded.record.headers),
                "payload": decoded.record.value,
                "error": reason,
                "attempts": attempts,
            }
            for decoded, reason, attempts in records
        ]
        session.execute(
            pg_insert(parked)
            .values(rows)
            .on_conflict_do_nothing(constraint="uq_inbox_parked_offset")
        )

    def parked_rows(
        self, session: Session, topic: str, partition: int, key: str | None = None
    ) -> Sequence[Row[Any]]:
        """The partition's parked records in offset order (of one key when given)."""
        query = (
            select(parked).where(*self.match(parked, topic, partition)).order_by(parked.c.offset)
        )
        if key is not None:
            query = query.where(parked.c.key == key)
        return session.execute(query).all()

    def unpark(self, session: Session, parked_id: int) -> None:
        """Remove a parked record (applied, or found already applied)."""
        session.execute(delete(parked).where(parked.c.id == parked_id))

    def still_failing(self, session: Session, parked_id: int, error: str) -> None:
        """A redrive of a parked record failed again: count it and keep the newest error."""
        session.execute(
            update(parked)
            .where(parked.c.id == parked_id)
            .values(error=error, attempts=parked.c.attempts + 1, last_seen=func.now())
        )


# -- reading and moving every consumer's rows (operators, metrics) --------------------------------
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


def _is_uuid(text: str) -> bool:
    """True when ``text`` is a UUID in canonical form (as `str(uuid.UUID(...))` writes it)."""
    try:
        return str(uuid.UUID(text)) == text
    except ValueError:
        return False


def parked_headers(row: Any) -> list[tuple[str, bytes]]:
    """A parked row's headers back as Kafka headers (stored as text)."""
    return [(k, str(v).encode()) for k, v in (row.headers or {}).items()]
