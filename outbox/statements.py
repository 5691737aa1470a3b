"""The outbox's write path: SQL built once, executed on the session's own driver connection.

Every service transaction pays for this path, so it avoids what costs client CPU per event:
no ORM unit-of-work bookkeeping, no statement compiled per call (a multi-row ``insert().values()``
is compiled anew each time), the same SQL text every time so that psycopg prepares it on the
server after a few executions, and in delete mode the INSERT and the DELETE in one round trip:
one event through a function that runs both (``outbox_write_deleted``, migration 0008: cheaper
for the client than psycopg's pipeline mode), several events as two array statements (arrays
unnested, whatever their number) pipelined. A writable CTE cannot do it in one statement: the
DELETE of a ``WITH ... INSERT`` runs on the statement's snapshot and cannot see the rows the
INSERT adds. Message mode writes no row: each event is a transactional logical decoding
message (``emit_messages``).

Drivers other than psycopg 3 get the same SQL through SQLAlchemy's ``text()`` (compiled once).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any, NamedTuple
from uuid import UUID

import psycopg
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from outboxkit.kernel.envelope import Envelope, extra_headers
from outboxkit.kernel.errors import OutboxError

_COLUMNS = (
    "id, aggregatetype, aggregateid, type, payload, traceparent, headers, schema_version, "
    "created_at"
)
INSERT_ONE = (
    f"INSERT INTO outbox ({_COLUMNS}) "
    "VALUES (%s, %s, %s, %s, CAST(%s AS jsonb), %s, CAST(%s AS jsonb), %s, %s)"
)
INSERT_MANY = (
    f"INSERT INTO outbox ({_COLUMNS}) "
    "SELECT * FROM unnest(CAST(%s AS uuid[]), CAST(%s AS text[]), CAST(%s AS text[]), "
    "CAST(%s AS text[]), CAST(%s AS jsonb[]), CAST(%s AS text[]), CAST(%s AS jsonb[]), "
    "CAST(%s AS int[]), CAST(%s AS timestamptz[]))"
)
# Message mode: one transactional logical decoding message per event, no table. The content is
# built by Postgres so that payload and headers are exactly its jsonb text, as an outbox row's
# jsonb columns reach the connector; the first parameter is the prefix.
_CONTENT = (
    "jsonb_build_object('id', CAST(e.id AS text), 'aggregatetype', e.aggregatetype, "
    "'aggregateid', e.aggregateid, 'type', e.type, 'payload', CAST(e.payload AS text), "
    "'traceparent', e.traceparent, 'headers', CAST(e.headers AS text), "
    "'schema_version', e.schema_version)"
)
EMIT_ONE = (
    f"SELECT pg_logical_emit_message(true, %s, CAST({_CONTENT} AS text)) FROM (VALUES "
    "(CAST(%s AS uuid), CAST(%s AS text), CAST(%s AS text), CAST(%s AS text), "
    "CAST(%s AS jsonb), CAST(%s AS text), CAST(%s AS jsonb), CAST(%s AS int))) "
    "AS e(id, aggregatetype, aggregateid, type, payload, traceparent, headers, schema_version)"
)
EMIT_MANY = (
    f"SELECT pg_logical_emit_message(true, %s, CAST({_CONTENT} AS text)) FROM unnest("
    "CAST(%s AS uuid[]), CAST(%s AS text[]), CAST(%s AS text[]), CAST(%s AS text[]), "
    "CAST(%s AS jsonb[]), CAST(%s AS text[]), CAST(%s AS jsonb[]), CAST(%s AS int[])) "
    "WITH ORDINALITY AS e(id, aggregatetype, aggregateid, type, payload, traceparent, headers, "
    "schema_version, n) ORDER BY e.n"
)
# Delete mode, one event: the INSERT and the DELETE in one statement (migration 0008's function),
# one execute without a pipeline. Several events keep the two array statements, pipelined.
WRITE_DELETED_ONE = (
    "SELECT outbox_write_deleted(%s, %s, %s, %s, CAST(%s AS jsonb), %s, CAST(%s AS jsonb), %s, %s)"
)
DELETE_ONE = "DELETE FROM outbox WHERE id = %s"
DELETE_MANY = "DELETE FROM outbox WHERE id = ANY(CAST(%s AS uuid[]))"


Statement = tuple[str, tuple[Any, ...]]  # SQL with %s placeholders, and its parameters


class Row(NamedTuple):
    """One outbox row's values, in the order of the columns above."""

    id: UUID
    aggregatetype: str
    aggregateid: str
    type: str
    payload: str  # JSON text (compact), cast to jsonb by the statement
    traceparent: str | None
    headers: str | None  # JSON text of the headers besides traceparent, or None
    schema_version: int
    created_at: datetime

    @classmethod
    def of(cls, envelope: Envelope, payload_json: str) -> Row:
        """The row that carries ``envelope`` (its payload already encoded by validation)."""
        extra = extra_headers(envelope)
        return cls(
            envelope.event_id,
            envelope.aggregate_type,
            envelope.aggregate_id,
            envelope.event_type,
            payload_json,
            envelope.traceparent,
            json.dumps(extra, ensure_ascii=False) if extra else None,
            envelope.schema_version,
            envelope.created_at,
        )


def write_rows(session: Session, rows: Sequence[Row], *, delete: bool) -> None:
    """Insert ``rows`` into the outbox in ``session``'s transaction (and, with ``delete``,
    delete them again in the same round trip); never commits."""
    if not rows:
        return
    if len(rows) == 1:
        if delete:
            execute(session, [(WRITE_DELETED_ONE, rows[0])], one_event=True)
            return
        insert: Statement = (INSERT_ONE, rows[0])
        remove: Statement = (DELETE_ONE, (rows[0].id,))
    else:
        insert = (INSERT_MANY, tuple(list(column) for column in zip(*rows, strict=True)))
        remove = (DELETE_MANY, ([r.id for r in rows],))
    execute(session, [insert, remove] if delete else [insert], one_event=len(rows) == 1)


def emit_messages(session: Session, prefix: str, rows: Sequence[Row]) -> None:
    """Write each of ``rows`` as a transactional logical decoding message with ``prefix``, in
    ``session``'s transaction and in order (decoded at commit, with its other changes)."""
    if not rows:
        return
    fields = [row[:-1] for row in rows]  # everything but created_at
    if len(rows) == 1:
        emit: Statement = (EMIT_ONE, (prefix, *fields[0]))
    else:
        emit = (EMIT_MANY, (prefix, *(list(column) for column in zip(*fields, strict=True))))
    execute(session, [emit], one_event=len(rows) == 1)


def execute(session: Session, statements: Sequence[Statement], *, one_event: bool) -> None:
    """Run ``statements`` in order in ``session``'s transaction: on its psycopg connection, in
    one round trip when there are several (pipeline mode, libpq 14 and later); through
    SQLAlchemy's ``text()`` for other drivers. ``one_event``: they write one event (on the
    connection's kept cursor, `_cursor`)."""
    session.flush()  # pending ORM objects first, as session.execute would
    pooled = session.connection().connection
    driver = pooled.driver_connection
    if not isinstance(driver, psycopg.Connection):
        for sql, params in statements:
            session.execute(_as_text(sql), _as_params(params))
        return
    pipelined = len(statements) > 1 and psycopg.Pipeline.is_supported()
    with (
        as_sqlalchemy_errors(statements[0]),
        _cursor(pooled, driver, keep=one_event) as cursor,
        driver.pipeline() if pipelined else contextlib.nullcontext(),
    ):
        for sql, params in statements:
            cursor.execute(sql, params)


_CURSOR = "outboxkit.outbox_cursor"  # the key of a connection's cursor in the pool's info


@contextlib.contextmanager
def _cursor(pooled: Any, driver: psycopg.Connection[Any], *, keep: bool) -> Iterator[Any]:
    """A cursor of ``driver``: with ``keep``, the one kept in the pool's ``info`` of that
    connection (which lives and dies with it), else a new one closed after use.

    A new cursor sets up its parameter adapters again on its first execute, ~25 us of a
    publish's ~150-230 us of client CPU. A kept cursor holds its
    last statement's parameters until the next: one event's, at most the payload limit per
    pooled connection, which is why a write of several events takes a new one."""
    if not keep:
        with driver.cursor() as cursor:
            yield cursor
        return
    cursor = pooled.info.get(_CURSOR)
    if cursor is None or cursor.closed or cursor.connection is not driver:
        cursor = pooled.info[_CURSOR] = driver.cursor()
    yield cursor


@contextlib.contextmanager
def as_sqlalchemy_errors(statement: Statement) -> Iterator[None]:
    """A driver error raised as SQLAlchemy's (OperationalError, IntegrityError...), as it would
    be through ``session.execute``: callers and ``outboxkit.kernel.errors.is_transient`` see one
    family (a lost connection or a statement timeout is an outage, answered 503 and retried)."""
    try:
        yield
    except psycopg.errors.UndefinedFunction as exc:
        if "outbox_write_deleted" not in str(exc):
            raise DBAPIError.instance(*statement, exc, psycopg.Error) from exc
        raise OutboxError(
            "the database lacks the outbox's function outbox_write_deleted: apply the "
            "framework's migrations (outboxkit db upgrade)"
        ) from DBAPIError.instance(*statement, exc, psycopg.Error)
    except psycopg.Error as exc:
        raise DBAPIError.instance(*statement, exc, psycopg.Error) from exc


_TEXT_CACHE: dict[str, Any] = {}


def _as_text(sql: str) -> Any:
    """``sql`` with named binds (:p0, :p1...) for SQLAlchemy's text(), built once per statement."""
    if sql not in _TEXT_CACHE:
        parts = sql.split("%s")
        named = parts[0] + "".join(f":p{n}{part}" for n, part in enumerate(parts[1:]))
        _TEXT_CACHE[sql] = text(named)
    return _TEXT_CACHE[sql]


def _as_params(values: Sequence[Any]) -> dict[str, Any]:
    return {f"p{n}": value for n, value in enumerate(values)}
