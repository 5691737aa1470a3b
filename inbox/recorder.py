"""The inbox's bookkeeping SQL, in one place: watermarks, the window of recent event ids, and
parked records of one consumer, as the apply loop, redrive and the consumer runner use them
(reading and moving every consumer's rows, for operators and metrics: `inbox.operations`)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Connection,
    Table,
    Text,
    bindparam,
    cast,
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
from sqlalchemy.engine import Row
from sqlalchemy.orm import Session

from inbox.decision import prune_floor
from inbox.tables import (
    ERROR_CHARS,
    EVENT_ID_CHARS,
    EVENT_TYPE_CHARS,
    HEADER_NAME_CHARS,
    HEADER_VALUE_CHARS,
    HEADERS_SHOWN,
    KEY_CHARS,
    ledger,
    parked,
    recent_ids,
    watermarks,
)
from outbox.wire.record import Decoded, key_bytes, key_text, readable

Executor = Session | Connection
EVENT_ID = UUID(as_uuid=False)  # an event id as the window holds it, read and bound as str


def _split(name: str, item: Any) -> ColumnElement[Any]:
    """The parameter ``name``, one comma-separated text, as an array of ``item`` split by
    Postgres. A slice's ids bound as a list cost psycopg a dump per element in Python: 1,000
    UUIDs took 1.43 ms of client CPU (4.6 ms wall) against 0.18 ms (1.5 ms) joined into one
    text, 1,000 offsets 0.64 against 0.24 ms (measured). Callers join values without commas."""
    return cast(func.string_to_array(bindparam(name, type_=Text), ","), ARRAY(item))


def _this_partition(table: Table) -> tuple[ColumnElement[bool], ...]:
    return (
        table.c.consumer == bindparam("consumer"),
        table.c.topic == bindparam("topic"),
        table.c.partition == bindparam("partition"),
    )


# Built once. Which wanted ids a partition's window holds: its slices unnested, joined with the
# wanted ids (a hash join).
_HELD = (
    func.unnest(recent_ids.c.event_ids)
    .table_valued(column("event_id", EVENT_ID))
    .render_derived("held")
    .lateral()
)
_ASKED = (
    func.unnest(_split("wanted", EVENT_ID))
    .table_valued(column("event_id", EVENT_ID))
    .render_derived("asked")
)
_RECENT = (
    select(_ASKED.c.event_id)
    .select_from(recent_ids)
    .join(_HELD, true())
    .join(_ASKED, _ASKED.c.event_id == _HELD.c.event_id)
    .where(*_this_partition(recent_ids))
)
# Which of a slice's keys have parked records, by the index on md5(raw_key): one array
# parameter, not an IN list of a parameter per key (rendered and bound anew for each slice).
_PARKED_KEYS = (
    select(parked.c.raw_key)
    .distinct()
    .where(*_this_partition(parked), func.md5(parked.c.raw_key) == func.any(_split("md5s", Text)))
)
_REMEMBER = insert(recent_ids).values(
    consumer=bindparam("consumer"),
    topic=bindparam("topic"),
    partition=bindparam("partition"),
    first_offset=bindparam("first_offset"),
    last_offset=bindparam("last_offset"),
    event_ids=_split("event_ids", EVENT_ID),
    offsets=_split("offsets", BigInteger),
)


@dataclass(frozen=True)
class Recorder:
    """One consumer's inbox rows. ``window``: offsets per partition over which applied event ids
    are kept against re-sends (0: none, the watermark alone). ``ledger``: every applied event
    is also appended to the ledger (`inbox.tables.ledger`)."""

    consumer: str
    window: int = 0
    ledger: bool = False

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
        if not self.window:
            return frozenset()
        # Only ids in canonical UUID form were ever remembered (applied records decoded).
        wanted = sorted({i for i in ids if i and _is_uuid(i)})
        if not wanted:
            return frozenset()
        rows = session.execute(
            _RECENT,
            {
                "consumer": self.consumer,
                "topic": topic,
                "partition": partition,
                "wanted": ",".join(wanted),
            },
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
        joined = ",".join(event_ids)
        if joined.count(",") != len(event_ids) - 1:  # the server's cast finds other non-UUIDs
            raise ValueError(f"{topic}[{partition}]: an event id that is not a UUID: {joined!r}")
        session.execute(
            _REMEMBER,
            {
                "consumer": self.consumer,
                "topic": topic,
                "partition": partition,
                "first_offset": pairs[0][1],
                "last_offset": pairs[-1][1],
                "event_ids": joined,
                "offsets": ",".join(str(offset) for _, offset in pairs),
            },
        )

    def append_ledger(
        self, session: Session, topic: str, partition: int, applied: Sequence[tuple[str, int]]
    ) -> None:
        """Append a slice's applied (event id, offset) pairs to the ledger, in the transaction
        that applied them (nothing when the ledger is off)."""
        if not self.ledger or not applied:
            return
        session.execute(
            insert(ledger),
            [
                {
                    "consumer": self.consumer,
                    "topic": topic,
                    "partition": partition,
                    "offset": offset,
                    "event_id": event_id,
                }
                for event_id, offset in applied
            ],
        )

    # -- parked records ------------------------------------------------------------------------
    def parked_keys(
        self, session: Session, topic: str, partition: int, keys: Iterable[str | None]
    ) -> frozenset[str]:
        """Which of ``keys`` (as `outbox.wire.record.key_text` reads them) have a parked record
        waiting for redrive."""
        wanted = {key_bytes(k) for k in keys if k is not None}
        if not wanted:
            return frozenset()
        digests = ",".join(hashlib.md5(k).hexdigest() for k in wanted)  # hex: no commas
        rows = session.execute(
            _PARKED_KEYS,
            {"consumer": self.consumer, "topic": topic, "partition": partition, "md5s": digests},
        )
        return frozenset(key_text(r[0]) or "" for r in rows if r[0] in wanted)

    def park(self, session: Session, records: Sequence[tuple[Decoded, str, int]]) -> None:
        """Keep records that were not applied, each with why and after how many attempts, in one
        statement (once per offset). Whatever the records' bytes, the insert cannot fail on
        them: the raw bytes go to bytea columns, the text columns get readable, bounded copies."""
        if not records:
            return
        rows = [
            self._parked_row(decoded, reason, attempts) for decoded, reason, attempts in records
        ]
        session.execute(
            pg_insert(parked)
            .values(rows)
            .on_conflict_do_nothing(constraint="uq_inbox_parked_offset")
        )

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
        """The partition's parked records in offset order (of one key when given)."""
        query = (
            select(parked).where(*self.match(parked, topic, partition)).order_by(parked.c.offset)
        )
        if key is not None:
            raw = key_bytes(key)
            query = query.where(_md5_in({raw}), parked.c.raw_key == raw)
        return session.execute(query).all()

    def unpark(self, session: Session, parked_id: int) -> None:
        """Remove a parked record (applied, or found already applied)."""
        session.execute(delete(parked).where(parked.c.id == parked_id))

    def still_failing(self, session: Session, parked_id: int, error: str) -> None:
        """A redrive of a parked record failed again: count it and keep the newest error."""
        session.execute(
            update(parked)
            .where(parked.c.id == parked_id)
            .values(
                error=readable(error, ERROR_CHARS),
                attempts=parked.c.attempts + 1,
                last_seen=func.now(),
            )
        )


def _md5_in(keys: Iterable[bytes]) -> ColumnElement[bool]:
    """md5(raw_key) among the keys' (the indexed expression; equal digests, then equal keys)."""
    return func.md5(parked.c.raw_key).in_(sorted(hashlib.md5(k).hexdigest() for k in keys))


_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _is_uuid(text: str) -> bool:
    """True when ``text`` is a UUID in canonical form (as `str(uuid.UUID(...))` writes it); a
    pattern, not a parse: it runs for every id of a slice."""
    return _CANONICAL_UUID.fullmatch(text) is not None
