"""A consumer's parked records, as the apply loop, redrive and the retrier keep them: which keys
are held, parking (with the delayed retry and the history of failures), reading a partition's or
a key's parked records, unparking, a failure again, and which records are due to retry. The
callers hold the partition's watermark lock (`inbox.recorder.Recorder.lock`) while they write."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from sqlalchemy import (
    ColumnElement,
    Connection,
    Exists,
    Interval,
    Table,
    Text,
    cast,
    delete,
    exists,
    func,
    literal,
    literal_column,
    null,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Row
from sqlalchemy.orm import Session

from inbox import statements
from inbox.position import OffsetsMoved
from inbox.tables import (
    ERROR_CHARS,
    EVENT_ID_CHARS,
    EVENT_TYPE_CHARS,
    HEADER_NAME_CHARS,
    HEADER_VALUE_CHARS,
    HEADERS_SHOWN,
    KEY_CHARS,
    parked,
    skipped,
    watermarks,
)
from outboxkit.kernel.wire.record import Decoded, KafkaRecord, key_bytes, key_text, readable

Executor = Session | Connection


class Parking(NamedTuple):
    """A record the apply loop did not apply, as `Recorder.park` keeps it."""

    decoded: Decoded
    reason: str  # why it is not applied
    attempts: int  # runs of its handler
    failed: bool  # False: held behind a parked record of its key (nothing in its history)
    retry_in: float | None = None  # seconds to its delayed retry; None: parked for a person


@dataclass(frozen=True)
class ParkedRows:
    """One consumer's parked records (the part of `inbox.recorder.Recorder` that keeps them)."""

    consumer: str

    def match(self, table: Table, topic: str, partition: int) -> tuple[ColumnElement[bool], ...]:
        """Filter of ``table`` to this consumer's rows of one topic partition."""
        return (
            table.c.consumer == self.consumer,
            table.c.topic == topic,
            table.c.partition == partition,
        )

    def _named(self, topic: str, partition: int) -> dict[str, Any]:
        """The parameters of `inbox.statements` that name one partition of this consumer."""
        return {"p_consumer": self.consumer, "p_topic": topic, "p_partition": partition}

    def parked_keys(
        self, session: Session, topic: str, partition: int, keys: Iterable[str | None]
    ) -> frozenset[str]:
        """Which of ``keys`` (as `outboxkit.kernel.wire.record.key_text` reads them) have a parked
        record waiting for redrive."""
        wanted = {key_bytes(k) for k in keys if k is not None}
        if not wanted:
            return frozenset()
        digests = ",".join(hashlib.md5(k).hexdigest() for k in wanted)  # hex: no commas
        rows = session.execute(
            statements.PARKED_KEYS,
            {**self._named(topic, partition), "p_md5s": digests},
        )
        return frozenset(key_text(r[0]) or "" for r in rows if r[0] in wanted)

    def decided_ids(
        self, session: Session, topic: str, partition: int, ids: Iterable[str | None]
    ) -> frozenset[str]:
        """Which of ``ids`` are of the partition's parked records or of records an operator
        skipped: decided here, though the window never held them (one statement)."""
        wanted = sorted({i for i in ids if i})
        if not wanted:
            return frozenset()
        query = (
            select(parked.c.event_id)
            .where(*self.match(parked, topic, partition), parked.c.event_id.in_(wanted))
            .union(
                select(skipped.c.event_id).where(
                    *self.match(skipped, topic, partition), skipped.c.event_id.in_(wanted)
                )
            )
        )
        return frozenset(str(r[0]) for r in session.execute(query))

    def park(
        self, session: Session, records: Sequence[Parking], topic_id: str | None = None
    ) -> None:
        """Keep records that were not applied, each with why, after how many attempts, when it
        is retried (on the database's clock) and the failure in its history, in one statement
        (once per offset of the topic incarnation ``topic_id``); migration 0011's trigger marks
        their partitions' watermark rows as having parked records (`Locked.any_parked`).
        Whatever the records' bytes, the insert cannot fail on them: the raw bytes go to bytea
        columns, the text columns get readable, bounded copies."""
        if not records:
            return
        rows = []
        for parking in records:
            retry_at = _later(func.now(), parking.retry_in)
            failure = [history_entry(func.now(), parking.reason, retry_at)]
            rows.append(
                self._parked_row(parking.decoded, parking.reason, parking.attempts)
                | {
                    "topic_id": topic_id,
                    "retry_at": retry_at,
                    "history": func.jsonb_build_array(*failure) if parking.failed else [],
                }
            )
        kept = session.execute(
            pg_insert(parked)
            .values(rows)
            .on_conflict_do_nothing(constraint="uq_inbox_parked_offset")
            .returning(parked.c.offset)
        )
        taken = {int(r[0]) for r in kept}
        if len(taken) < len(records):
            self._same_as_parked(
                session, [p for p in records if p.decoded.record.offset not in taken], topic_id
            )

    def _same_as_parked(
        self, session: Session, records: Sequence[Parking], topic_id: str | None
    ) -> None:
        """Check that ``records``, whose offsets already have a parked record of the same topic
        incarnation, are those records again (parked once more after a rewind, say); raise
        `inbox.position.OffsetsMoved` (the transaction rolls back, the partition stops) when one
        is another event: its offsets changed meaning, and dropping it would lose it."""
        first = records[0].decoded.record
        found = session.execute(
            select(parked.c.offset, parked.c.event_id, parked.c.payload).where(
                *self.match(parked, first.topic, first.partition),
                parked.c.offset.in_([p.decoded.record.offset for p in records]),
                parked.c.topic_id.is_not_distinct_from(topic_id),
            )
        )
        there = {int(offset): (event_id, payload) for offset, event_id, payload in found}
        for parking in records:
            record = parking.decoded.record
            event_id, payload = there.get(record.offset, (None, None))
            same = (event_id, payload) == (
                readable(parking.decoded.event_id, EVENT_ID_CHARS),
                record.value,
            )
            if not same:
                raise OffsetsMoved(
                    f"offset {record.offset} holds parked event {event_id} and now holds event "
                    f"{parking.decoded.event_id}: the partition's offsets no longer mean what "
                    "its parked records say (a re-created topic, or another cluster); see the "
                    "runbook 'When offsets change'",
                    rebased=False,
                )

    def recheck_parked(self, session: Session, topic: str, partition: int) -> None:
        """Set the partition's `Locked.any_parked` from the parked records left (after redrive
        or skip took some away; the caller holds the lock)."""
        session.execute(
            update(watermarks)
            .where(*self.match(watermarks, topic, partition))
            .values(any_parked=self._any_parked(topic, partition))
        )

    def _any_parked(self, topic: str, partition: int) -> Exists:
        """Whether the partition has parked records, as a column's value."""
        return exists().where(*self.match(parked, topic, partition))

    def _parked_row(self, decoded: Decoded, reason: str, attempts: int) -> dict[str, Any]:
        record = decoded.record
        headers = list(record.headers or ())
        return {
            "consumer": self.consumer,
            "topic": record.topic,
            "partition": record.partition,
            "offset": record.offset,
            "raw_key": record.key,
            "payload": record.value,
            "header_names": [name.encode("utf-8", "surrogatepass") for name, _ in headers],
            "header_values": [value for _, value in headers],
            "timestamp_ms": record.timestamp_ms,
            "key": readable(record.key, KEY_CHARS),
            "event_id": readable(decoded.event_id, EVENT_ID_CHARS),
            "event_type": readable(decoded.event_type, EVENT_TYPE_CHARS),
            "headers": {
                readable(name, HEADER_NAME_CHARS): readable(value, HEADER_VALUE_CHARS)
                for name, value in headers[:HEADERS_SHOWN]
            },
            "error": readable(reason, ERROR_CHARS),
            "attempts": attempts,
        }

    def parked_rows(
        self, session: Session, topic: str, partition: int, key: str | None = None
    ) -> Sequence[Row[Any]]:
        """The partition's parked records in the order they were parked (of one key when given):
        offset order within a topic's incarnation, an older incarnation's first."""
        if key is not None:
            return self.key_rows(session, topic, partition, key_bytes(key))
        query = select(parked).where(*self.match(parked, topic, partition)).order_by(parked.c.id)
        return session.execute(query).all()

    def unpark(self, session: Session, parked_id: int) -> None:
        """Remove a parked record (applied, or found already applied)."""
        session.execute(delete(parked).where(parked.c.id == parked_id))

    def still_failing(
        self,
        session: Session,
        parked_id: int,
        error: str,
        *,
        at: datetime,
        attempts: int = 1,
        retry_in: float | None = None,
    ) -> None:
        """A redrive of a parked record failed again at ``at``: count its ``attempts``, keep
        the newest error, add the failure to its history, and set when it is retried
        (``retry_in`` seconds after ``at``; None: parked for a person)."""
        retry_at = _later(literal(at), retry_in)
        session.execute(
            update(parked)
            .where(parked.c.id == parked_id)
            .values(
                error=readable(error, ERROR_CHARS),
                attempts=parked.c.attempts + attempts,
                last_seen=func.now(),
                retry_at=retry_at,
                history=parked.c.history.concat(
                    func.jsonb_build_array(history_entry(literal(at), error, retry_at))
                ),
            )
        )

    def key_rows(
        self, session: Session, topic: str, partition: int, raw_key: bytes | None
    ) -> Sequence[Row[Any]]:
        """The parked records of one raw key (the record alone for a null key: null keys hold
        nothing) in the order they were parked."""
        if raw_key is None:
            return []
        query = select(parked).where(
            *self.match(parked, topic, partition), _md5_in({raw_key}), parked.c.raw_key == raw_key
        )
        return session.execute(query.order_by(parked.c.id)).all()

    def due(self, session: Session, at: datetime, topic: str, partition: int) -> Sequence[Row[Any]]:
        """The partition's records waiting to retry whose time has come by ``at``, in the
        order they were parked."""
        query = select(parked).where(
            *self.match(parked, topic, partition),
            parked.c.retry_at.is_not(None),
            parked.c.retry_at <= at,
        )
        return session.execute(query.order_by(parked.c.id)).all()

    def due_partitions(self, conn: Executor, at: datetime | None) -> list[tuple[str, int]]:
        """The (topic, partition)s with a record waiting to retry whose time has come by ``at``
        (None: the database's now), through the index on (consumer, retry_at)."""
        now = func.now() if at is None else literal(at)
        query = (
            select(parked.c.topic, parked.c.partition)
            .where(
                parked.c.consumer == self.consumer,
                parked.c.retry_at.is_not(None),
                parked.c.retry_at <= now,
            )
            .distinct()
            .order_by(parked.c.topic, parked.c.partition)
        )
        return [(str(t), int(p)) for t, p in conn.execute(query).all()]


def _later(at: ColumnElement[Any], seconds: float | None) -> ColumnElement[Any] | None:
    """``seconds`` after ``at``, as SQL (None when no time is given)."""
    if seconds is None:
        return None
    return at + literal(timedelta(seconds=seconds), Interval)


def history_entry(
    at: ColumnElement[Any], error: str, retry_at: ColumnElement[Any] | None
) -> ColumnElement[Any]:
    """One failure of a parked record as its history keeps it: ``{"at", "error",
    "retry_at"}`` (a JSON object built by Postgres, so the times are the database's)."""
    return func.jsonb_build_object(
        literal_column("'at'"),
        at,
        literal_column("'error'"),
        cast(literal(readable(error, ERROR_CHARS)), Text),
        literal_column("'retry_at'"),
        null() if retry_at is None else retry_at,
        type_=JSONB,
    )


def _md5_in(keys: Iterable[bytes]) -> ColumnElement[bool]:
    """md5(raw_key) among the keys' (the indexed expression; equal digests, then equal keys)."""
    return func.md5(parked.c.raw_key).in_(sorted(hashlib.md5(k).hexdigest() for k in keys))


def parked_headers(row: Any) -> list[tuple[str, bytes | None]]:
    """A parked (or skipped) row's headers back as the record had them, byte for byte."""
    names = row.header_names or ()
    return [
        (bytes(n).decode("utf-8", "surrogatepass"), None if v is None else bytes(v))
        for n, v in zip(names, row.header_values or (), strict=True)
    ]


def parked_record(row: Any) -> KafkaRecord:
    """The Kafka record a parked (or skipped) row was made from, byte for byte."""
    return KafkaRecord(
        row.topic,
        row.partition,
        row.offset,
        None if row.raw_key is None else bytes(row.raw_key),
        None if row.payload is None else bytes(row.payload),
        parked_headers(row),
        row.timestamp_ms,
    )
