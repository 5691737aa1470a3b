"""Operating an inbox, for operators and metrics: status, watermarks, parked records (list,
show, skip), redrive (in key order: `inbox.redrives`), explicit rewind (and its plan), and the
operator action log those commands append to."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Table,
    and_,
    delete,
    func,
    insert,
    literal,
    select,
    update,
)
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from inbox import judgement
from inbox.parked_rows import parked_headers as parked_headers
from inbox.parked_rows import parked_record
from inbox.recorder import Recorder
from inbox.redrives import RedriveResult as RedriveResult
from inbox.redrives import redrive as redrive
from inbox.redrives import retry_due as retry_due
from inbox.states import losts_to_json, states_from_row
from inbox.tables import operator_actions, parked, recent_ids, skipped, watermarks
from inbox.transitions import Refused as Refused


def status(engine: Engine, consumer: str | None = None) -> list[dict[str, Any]]:
    """One row per (consumer, topic, partition): its watermark (``offset``, the last offset
    applied), window size (``window``, event ids) and parked count (``parked``).

    Args:
        engine: The consumer's database.
        consumer: Only this consumer's partitions; None: every consumer's.
    """
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
    """Parked records, oldest first, with their readable copies (not their raw bytes nor their
    history, which `show` gives) and when each is retried (``retry_at``; None: parked for a
    person)."""
    listed = (c for c in parked.c if c.name not in RAW and c.name != "history")
    query = select(*listed).order_by(parked.c.id).limit(limit)
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


def stopped_partitions(conn: Connection, consumer: str) -> dict[tuple[str, int], str]:
    """Why each stopped (topic, partition) of ``consumer`` is stopped (`inbox.moves`)."""
    query = select(watermarks.c.topic, watermarks.c.partition, watermarks.c.stopped).where(
        watermarks.c.consumer == consumer, watermarks.c.stopped.is_not(None)
    )
    return {(t, int(p)): str(why) for t, p, why in conn.execute(query).all()}


def parked_counts(
    conn: Connection, consumers: Sequence[str], *, retrying: bool = False
) -> dict[str, int]:
    """Parked records per consumer of ``consumers`` (all when empty); ``retrying``: only those
    waiting for a delayed retry."""
    query = select(parked.c.consumer, func.count()).group_by(parked.c.consumer)
    if consumers:
        query = query.where(parked.c.consumer.in_(consumers))
    if retrying:
        query = query.where(parked.c.retry_at.is_not(None))
    return {c: int(n) for c, n in conn.execute(query).all()}


def partition_counts(conn: Connection, table: Table, consumer: str) -> dict[tuple[str, int], int]:
    """Rows of ``table`` (parked, skipped or the ledger) per (topic, partition) of ``consumer``."""
    query = (
        select(table.c.topic, table.c.partition, func.count())
        .where(table.c.consumer == consumer)
        .group_by(table.c.topic, table.c.partition)
    )
    return {(t, int(p)): int(n) for t, p, n in conn.execute(query).all()}


@dataclass(frozen=True)
class RewindPlan:
    """What `rewind` would do to one partition, read without changing it.

    Attributes:
        watermark: The partition's watermark now (the last offset applied).
        offset: The watermark asked for.
        forgotten: Event ids of the window above ``offset``, which the rewind forgets.
    """

    watermark: int
    offset: int
    forgotten: int

    @property
    def replayed(self) -> int:
        """Offsets above the new watermark up to the current one: read and applied again."""
        return max(self.watermark - self.offset, 0)


def rewind_plan(
    engine: Engine, consumer: str, topic: str, partition: int, offset: int
) -> RewindPlan:
    """What `rewind` to ``offset`` would do (nothing changed; no lock: the consumer may move
    the watermark on before the rewind runs).

    Raises:
        Refused: No such partition, or ``offset`` is not from -1 (its start) to one below its
            watermark (at the watermark nothing would be applied again; above it, records never
            applied would be passed).
    """
    recorder = Recorder(consumer)
    with engine.connect() as conn:
        watermark = conn.execute(
            select(watermarks.c.offset).where(*recorder.match(watermarks, topic, partition))
        ).scalar_one_or_none()
        if watermark is None:
            raise Refused(f"no watermark for {consumer} {topic}[{partition}]")
        refuse_rewind(topic, partition, int(watermark), offset)
        slices = conn.execute(
            select(recent_ids.c.offsets).where(
                *recorder.match(recent_ids, topic, partition), recent_ids.c.last_offset > offset
            )
        ).scalars()
        forgotten = sum(1 for offsets in slices for o in offsets if o > offset)
    return RewindPlan(int(watermark), offset, forgotten)


def refuse_rewind(topic: str, partition: int, watermark: int, offset: int) -> None:
    """Raise `Refused` unless ``offset`` is a rewind of a partition at ``watermark``."""
    if -1 <= offset < watermark:
        return
    if offset == watermark:
        raise Refused(
            f"{topic}[{partition}] is at watermark {watermark} already: nothing to rewind"
        )
    raise Refused(
        f"{offset} is not a rewind of {topic}[{partition}]: choose from -1 (read it from its "
        f"start) to {watermark - 1} (its watermark is {watermark}; a higher one would pass "
        "records never applied)"
    )


def rewind(engine: Engine, consumer: str, topic: str, partition: int, offset: int) -> int:
    """Move a watermark back to ``offset`` explicitly: the events applied above it are applied
    again, as far as the window of recent ids holds them.

    Those ids move from the window to the partition's ``replay_ids``: read again above the
    watermark (also after a start-over), each is applied once more, and everything else is
    judged as usual (a re-send that was skipped stays skipped; a record the window no longer
    covers is judged by its source's position, or, without one, by offset). The sources'
    states stay, so a failover after the rewind still knows what was decided. The partition's
    start-over count goes up, so a consumer query reading it from a checkpoint is refused its
    next slice and starts again from the inbox's watermarks
    (`spark_consumers.identity.prepare_start`): the records above ``offset`` are read again, not
    only below a checkpoint's offsets. Returns the previous watermark.

    Raises:
        Refused: As `rewind_plan`, judged under the partition's lock.
    """
    recorder = Recorder(consumer)
    with Session(engine) as session, session.begin():
        row = session.execute(
            select(watermarks)
            .where(*recorder.match(watermarks, topic, partition))
            .with_for_update()
        ).one_or_none()
        if row is None:
            raise Refused(f"no watermark for {consumer} {topic}[{partition}]")
        previous = int(row.offset)
        refuse_rewind(topic, partition, previous, offset)
        scope = recorder.match(recent_ids, topic, partition)
        again = set(row.replay_ids or ()) | applied_above(session, scope, offset)
        states = judgement.rewound(states_from_row(row), again)
        session.execute(
            update(watermarks)
            .where(*recorder.match(watermarks, topic, partition))
            .values(
                offset=offset,
                by_position=False,
                replay_ids=sorted(again),
                lost_histories=losts_to_json(states),
                epoch=watermarks.c.epoch + 1,
                updated_at=func.now(),
            )
        )
        _forget_above(session, scope, offset)
    return previous


def applied_above(session: Session, scope: Sequence[ColumnElement[bool]], offset: int) -> set[str]:
    """The ids the window holds at offsets above ``offset`` (one partition's, under its lock)."""
    rows = session.execute(
        select(recent_ids.c.event_ids, recent_ids.c.offsets).where(
            *scope, recent_ids.c.last_offset > offset
        )
    ).all()
    return {
        str(e) for ids, offsets in rows for e, o in zip(ids, offsets, strict=True) if o > offset
    }


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


def show(engine: Engine, parked_id: int) -> dict[str, Any] | None:
    """One parked record or skipped record, everything about it: the readable copies, and the
    raw key, value and headers as bytes (None when no record has that id)."""
    with engine.connect() as conn:
        for table, state in ((parked, "parked"), (skipped, "skipped")):
            row = conn.execute(select(table).where(table.c.id == parked_id)).one_or_none()
            if row is not None:
                found = {k: v for k, v in row._mapping.items() if k not in RAW}
                record = parked_record(row)
                return {
                    **found,
                    "state": state,
                    "raw_key": record.key,
                    "raw_value": record.value,
                    "raw_headers": list(record.headers),
                }
    return None


def skip(engine: Engine, parked_id: int, *, by: str, reason: str) -> dict[str, Any]:
    """Give up on one parked record on purpose: it moves to inbox_skipped with who skipped it,
    when and why, and its key is no longer held by it (records of the key parked behind it
    stay parked until the key is redriven). Runs under the partition's watermark lock, like
    the apply loop and redrive. Returns the skipped record's readable fields."""
    if not by.strip() or not reason.strip():
        raise ValueError("skipping a parked record needs who skips it and why")
    where = parked.c.id == parked_id
    with Session(engine) as session, session.begin():
        found = session.execute(select(parked).where(where)).one_or_none()
        if found is not None:  # lock its partition, then read it again: redrive may be first
            recorder = Recorder(found.consumer)
            recorder.lock(session, found.topic, found.partition)
            found = session.execute(select(parked).where(where)).one_or_none()
        if found is None:
            raise LookupError(f"no parked record with id {parked_id}")
        row = found
        who, why = literal(by[:255]).label("skipped_by"), literal(reason).label("reason")
        kept = [c for c in parked.c if c.name in skipped.c]  # not when it would be retried
        session.execute(
            insert(skipped).from_select(
                [*(c.name for c in kept), "skipped_by", "reason"],
                select(*kept, who, why).where(where),
            )
        )
        session.execute(delete(parked).where(where))
        recorder.recheck_parked(session, row.topic, row.partition)
    return {k: v for k, v in row._mapping.items() if k not in RAW}


def record_action(
    engine: Engine,
    *,
    who: str,
    command: str,
    target: str,
    detail: Mapping[str, Any],
    count: int | None,
) -> None:
    """Append one operator action to the action log (`outboxkit inbox actions`), in a
    transaction of its own, once the change it tells of committed: a command killed in between
    leaves its change unrecorded, never a record of a change that did not happen."""
    row = {"who": who[:255], "command": command, "target": target, "detail": dict(detail)}
    with engine.begin() as conn:
        conn.execute(insert(operator_actions).values(**row, count=count))


def list_actions(
    engine: Engine, *, limit: int = 100, command: str | None = None
) -> list[dict[str, Any]]:
    """The action log, newest first: at most ``limit`` rows (of ``command`` only, when given)."""
    query = select(operator_actions).order_by(
        operator_actions.c.at.desc(), operator_actions.c.id.desc()
    )
    if command:
        query = query.where(operator_actions.c.command == command)
    with engine.connect() as conn:
        return [dict(row._mapping) for row in conn.execute(query.limit(limit))]


# The raw-bytes columns of a parked row (shown by `show`, left out of listings).
RAW = frozenset({"raw_key", "payload", "header_names", "header_values"})
