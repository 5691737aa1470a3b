"""What the console reads: every query bounded (a LIMIT, or an index on what it filters by), on
the same tables the CLI reads (`inbox.tables`, `outbox.table`), Kafka's offsets and Connect's
status. Nothing here changes state."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Select, exists, func, literal, select, text
from sqlalchemy.engine import Connection

from inbox.tables import ledger, operator_actions, parked, recent_ids, skipped, watermarks
from outbox.table import outbox_scheduled_table, outbox_table

# Rows of the outbox or the scheduled table counted at most: the overview says "100,000+"
# beyond, and stays fast.
COUNTED = 100_000
PAGE = 50  # records listed a page


@dataclass(frozen=True)
class PartitionRow:
    """One partition of a consumer as the inbox sees it."""

    topic: str
    partition: int
    watermark: int
    updated_at: datetime
    stopped: str | None


@dataclass(frozen=True)
class ConsumerRows:
    """A consumer's partitions and parked counts."""

    consumer: str
    partitions: list[PartitionRow]
    parked: int
    retrying: int


def consumer_rows(conn: Connection, consumer: str) -> ConsumerRows:
    """Partitions (primary key), parked and retrying counts (index-only scans)."""
    rows = conn.execute(
        select(
            watermarks.c.topic,
            watermarks.c.partition,
            watermarks.c.offset,
            watermarks.c.updated_at,
            watermarks.c.stopped,
        )
        .where(watermarks.c.consumer == consumer)
        .order_by(watermarks.c.topic, watermarks.c.partition)
    ).all()
    mine = parked.c.consumer == consumer
    # Two counts, each an index-only scan: one FILTER in a single count would read the table.
    total = conn.execute(select(func.count()).where(mine)).scalar_one()
    retrying = conn.execute(
        select(func.count()).where(mine, parked.c.retry_at.is_not(None))
    ).scalar_one()
    partitions = [PartitionRow(t, int(p), int(o), u, s) for t, p, o, u, s in rows]
    return ConsumerRows(consumer, partitions, int(total), int(retrying))


@dataclass(frozen=True)
class Filters:
    """What a failures page is narrowed to (empty: everything)."""

    topic: str = ""
    key: str = ""
    event_type: str = ""
    since: datetime | None = None
    event_id: str = ""

    def apply(self, query: Select[Any]) -> Select[Any]:
        """``query`` on inbox_parked narrowed to these filters."""
        if self.topic:
            query = query.where(parked.c.topic == self.topic)
        if self.key:
            query = query.where(parked.c.key == self.key)
        if self.event_type:
            query = query.where(parked.c.event_type == self.event_type)
        if self.since is not None:
            query = query.where(parked.c.last_seen >= self.since)
        if self.event_id:
            query = query.where(parked.c.event_id == self.event_id)
        return query


@dataclass(frozen=True)
class Group:
    """Parked records of one consumer sharing a cause."""

    consumer: str
    cause: str
    count: int
    newest: datetime
    example_id: int


def failure_groups(
    conn: Connection, consumer: str, filters: Filters, limit: int = 100
) -> list[Group]:
    """The consumer's parked records grouped by cause, largest group first."""
    query = filters.apply(
        select(
            parked.c.cause,
            func.count().label("n"),
            func.max(parked.c.last_seen),
            func.min(parked.c.id),
        ).where(parked.c.consumer == consumer)
    )
    rows = conn.execute(
        query.group_by(parked.c.cause).order_by(text("n DESC"), parked.c.cause).limit(limit)
    ).all()
    return [Group(consumer, cause or "", int(n), newest, int(i)) for cause, n, newest, i in rows]


def group_records(
    conn: Connection,
    consumer: str,
    cause: str | None,
    filters: Filters,
    *,
    after: int = 0,
    limit: int = PAGE,
) -> list[dict[str, Any]]:
    """A page of parked records (of one cause, or of every cause when None), by id."""
    shown = [parked.c[c] for c in LISTED]
    query = filters.apply(select(*shown).where(parked.c.consumer == consumer, parked.c.id > after))
    if cause is not None:
        query = query.where(parked.c.cause == cause)
    return [dict(r._mapping) for r in conn.execute(query.order_by(parked.c.id).limit(limit))]


LISTED = (
    "id",
    "topic",
    "partition",
    "offset",
    "key",
    "event_id",
    "event_type",
    "error",
    "attempts",
    "first_seen",
    "last_seen",
    "retry_at",
)


def group_targets(
    conn: Connection, consumer: str, cause: str, filters: Filters, limit: int
) -> list[tuple[str, int, bytes | None]]:
    """The (topic, partition, raw key) a group's records are parked under, at most ``limit``."""
    query = filters.apply(
        select(parked.c.topic, parked.c.partition, parked.c.raw_key)
        .where(parked.c.consumer == consumer, parked.c.cause == cause)
        .distinct()
    )
    return [(t, int(p), k) for t, p, k in conn.execute(query.limit(limit)).all()]


@dataclass(frozen=True)
class DatabaseRows:
    """The outbox side of one database: its outbox and scheduled messages, if it has them."""

    outbox: int | None  # None: no outbox table
    scheduled: int | None
    due: int | None
    slots: list[dict[str, Any]] = field(default_factory=list)


def database_rows(conn: Connection) -> DatabaseRows:
    """Outbox size, scheduled messages pending and due (the due index), each counted up to
    COUNTED + 1, and the server's replication slots with how far each is behind."""
    have = set(
        conn.execute(
            text("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
        ).scalars()
    )
    outbox = scheduled = due = None
    if outbox_table.name in have:
        outbox = _bounded_count(conn, select(literal(1)).select_from(outbox_table))
    if outbox_scheduled_table.name in have:
        t = outbox_scheduled_table
        scheduled = _bounded_count(conn, select(literal(1)).select_from(t))
        due = _bounded_count(conn, select(literal(1)).where(t.c.deliver_at <= func.now()))
    slots = conn.execute(
        text(
            "SELECT slot_name, database, active, "
            "pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint AS behind "
            "FROM pg_replication_slots WHERE slot_type = 'logical' ORDER BY slot_name"
        )
    ).all()
    return DatabaseRows(outbox, scheduled, due, [dict(s._mapping) for s in slots])


@dataclass(frozen=True)
class Whereabouts:
    """Where one event is, as the databases tell (the topics are read on request)."""

    event_id: str
    outbox: list[dict[str, Any]] = field(default_factory=list)
    scheduled: list[dict[str, Any]] = field(default_factory=list)
    applied: list[dict[str, Any]] = field(default_factory=list)  # the ledger's rows
    in_window: list[dict[str, Any]] = field(default_factory=list)
    parked: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)


def _bounded_count(conn: Connection, rows: Select[Any]) -> int:
    """How many rows ``rows`` gives, counted up to COUNTED + 1 at most."""
    bounded = rows.limit(COUNTED + 1).subquery()
    return int(conn.execute(select(func.count()).select_from(bounded)).scalar_one())


def outbox_side(conn: Connection, event_id: str) -> tuple[list[Any], list[Any]]:
    """The event's outbox row and scheduled row on one database (each by primary key)."""
    have = set(
        conn.execute(
            text("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
        ).scalars()
    )
    found: list[list[Any]] = []
    for table in (outbox_table, outbox_scheduled_table):
        rows = []
        if table.name in have:
            columns = [c for c in table.c if c.name != "payload"]
            rows = [
                dict(r._mapping)
                for r in conn.execute(select(*columns).where(table.c.id == event_id))
            ]
        found.append(rows)
    return found[0], found[1]


def inbox_side(conn: Connection, consumer: str, event_id: str) -> dict[str, list[dict[str, Any]]]:
    """What one consumer's inbox holds of the event: ledger rows (index on consumer, event
    id), the window's slices naming it (a handful of rows per partition), parked (index on
    event id) and skipped records."""
    found: dict[str, list[dict[str, Any]]] = {}
    found["applied"] = _rows(
        conn,
        select(ledger.c.topic, ledger.c.partition, ledger.c.offset, ledger.c.applied_at).where(
            ledger.c.consumer == consumer, ledger.c.event_id == event_id
        ),
    )
    found["in_window"] = _rows(
        conn,
        select(recent_ids.c.topic, recent_ids.c.partition, recent_ids.c.first_offset).where(
            recent_ids.c.consumer == consumer,
            recent_ids.c.event_ids.any(event_id),
        ),
    )
    for name, table in (("parked", parked), ("skipped", skipped)):
        found[name] = _rows(
            conn,
            select(
                table.c.id, table.c.topic, table.c.partition, table.c.offset, table.c.error
            ).where(table.c.consumer == consumer, table.c.event_id == event_id),
        )
    return found


def actions(conn: Connection, limit: int = 50) -> list[dict[str, Any]]:
    """The operator action log, newest first (its index on ``at``)."""
    query = (
        select(operator_actions)
        .order_by(operator_actions.c.at.desc(), operator_actions.c.id.desc())
        .limit(limit)
    )
    return _rows(conn, query)


def action_done(conn: Connection, request: str) -> dict[str, Any] | None:
    """The logged action a console request made, if it was made (the request index)."""
    row = conn.execute(
        select(operator_actions)
        .where(
            operator_actions.c.detail.has_key("request"),
            operator_actions.c.detail["request"].astext == request,
        )
        .limit(1)
    ).one_or_none()
    return None if row is None else dict(row._mapping)


def any_parked(conn: Connection, consumer: str) -> bool:
    """Whether ``consumer`` has a parked record (one index probe)."""
    return bool(conn.execute(select(exists().where(parked.c.consumer == consumer))).scalar())


def _rows(conn: Connection, query: Select[Any]) -> list[dict[str, Any]]:
    return [dict(r._mapping) for r in conn.execute(query)]


def valid_uuid(value: str) -> bool:
    """Whether ``value`` is a UUID (event ids are: anything else finds nothing)."""
    import uuid

    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True
