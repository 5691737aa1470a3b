"""Delete mode's write at commit: an event's outbox row travels in the round trip that commits
its transaction, instead of one round trip of its own.

psycopg 3 sends BEGIN, every statement and COMMIT each in a round trip of its own, so a service
transaction of one business statement took three and the outbox's own statement a fourth
(`docs/bench/outbox-at-commit`). In delete mode nothing is ever visible of an outbox row inside
its transaction (it is deleted as it is inserted: only the WAL keeps it), so the row can wait
until COMMIT and be written just ahead of it, in one simple-protocol message ("SELECT
outbox_write_deleted(...); COMMIT"): its values are literals escaped by libpq
(``PQescapeLiteral``, which knows the connection's encoding), no parameter adaptation, no
round trip.

The rows wait in the pooled connection's ``info``, tied to the SQLAlchemy transaction they were
published in, and SQLAlchemy's connection events (on every Engine) move them:
- at the transaction's commit they are written ahead of COMMIT (or before PREPARE TRANSACTION);
- at a savepoint's start they are written at once, so that a savepoint rolled back takes with it
  exactly what was published inside it: at its rollback the rows waiting are dropped;
- at the transaction's rollback they are dropped;
- any other write of the outbox in the transaction (another mode, the driver not psycopg 3)
  writes them first (`flush`), so that events keep their order in the WAL.
A transaction committed behind SQLAlchemy's back (the DBAPI connection's own ``commit()``) would
not write them: its rows are dropped with an error in the log when the connection is next used
for publishing. Publish errors that only the server can find (the function missing before the
migrations ran, a lost connection) are raised by the commit instead of ``publish``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import psycopg
from psycopg import generators, pq
from sqlalchemy import Connection, Engine, event
from sqlalchemy.orm import Session

from outbox.statements import WRITE_DELETED_ONE, Row, as_sqlalchemy_errors

log = logging.getLogger(__name__)

_PENDING = "outboxkit.outbox_at_commit"  # the key of the waiting rows in the pool's info
_CALL = b"SELECT outbox_write_deleted(%s::uuid, %s, %s, %s, %s::jsonb, %s, %s::jsonb, %s, %s)"
_DONE = (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK)


@dataclass
class _Pending:
    """The rows waiting for the commit of one SQLAlchemy transaction."""

    transaction: Any  # the connection's root Transaction they were published in
    rows: list[Row] = field(default_factory=list)


def defer(session: Session, rows: Sequence[Row]) -> bool:
    """Keep delete-mode ``rows`` for the commit of ``session``'s transaction. False when they
    cannot wait (the driver is not psycopg 3, or the connection autocommits): the caller writes
    them now."""
    conn = session.connection()
    pooled = conn.connection
    driver = pooled.driver_connection
    if not isinstance(driver, psycopg.Connection) or driver.autocommit:
        return False
    root = conn.get_transaction()
    pending = pooled.info.get(_PENDING)
    if pending is None or pending.transaction is not root:
        _drop_stale(pending)
        pending = pooled.info[_PENDING] = _Pending(root)
    pending.rows.extend(rows)
    return True


def flush(session: Session) -> None:
    """Write the rows waiting in ``session``'s transaction now (before another outbox write)."""
    if session.in_transaction():
        _write_waiting(session.connection(), commit=False)


def _take(conn: Connection) -> list[Row]:
    """The rows waiting for ``conn``'s transaction, no longer waiting."""
    pending: _Pending | None = conn.info.pop(_PENDING, None)
    if pending is None or not pending.rows:
        return []
    if pending.transaction is not conn.get_transaction():
        _drop_stale(pending)
        return []
    return pending.rows


def _drop_stale(pending: _Pending | None) -> None:
    if pending is not None and pending.rows:
        log.error(
            "%d outbox event(s) of a transaction that ended without a commit or rollback "
            "through SQLAlchemy were dropped (commit with the Session or Connection, not the "
            "DBAPI connection)",
            len(pending.rows),
        )


def _write_waiting(conn: Connection, *, commit: bool) -> None:
    """Write the rows waiting for ``conn``'s transaction, then COMMIT in the same message when
    ``commit`` (the driver's own commit then finds the transaction ended and does nothing)."""
    rows = _take(conn)
    if rows:  # only psycopg 3 connections have waiting rows (`defer`)
        run(cast(psycopg.Connection[Any], conn.connection.driver_connection), rows, commit=commit)


def run(driver: psycopg.Connection[Any], rows: Sequence[Row], *, commit: bool) -> None:
    """``rows`` written by ``outbox_write_deleted`` (and COMMIT after them when ``commit``) in
    one simple-protocol message on ``driver``; a failure is raised as SQLAlchemy's error of it
    (an unreachable database as OperationalError, as through ``session.execute``)."""
    pgconn = driver.pgconn
    escape = pq.Escaping(pgconn).escape_literal
    encoding = driver.info.encoding
    calls = [_call(escape, encoding, row) for row in rows]
    if commit:
        calls.append(b"COMMIT")
    with as_sqlalchemy_errors((WRITE_DELETED_ONE, tuple(rows[0]))), driver.lock:
        pgconn.send_query(b"; ".join(calls))
        results = driver.wait(generators.execute(pgconn))
        for result in results:
            if result.status not in _DONE:
                raise psycopg.errors.error_from_result(result, encoding=encoding)


def _call(escape: Any, encoding: str, row: Row) -> bytes:
    """One row's ``SELECT outbox_write_deleted(...)`` with its values as literals: the id and
    the time are ASCII this module wrote (no escaping needed), the text is escaped. Validation
    already refused NUL characters and lone surrogates, which no literal could carry."""

    def literal(value: str | None) -> bytes:
        return b"NULL" if value is None else bytes(escape(value.encode(encoding)))

    return _CALL % (
        b"'%s'" % str(row.id).encode("ascii"),
        literal(row.aggregatetype),
        literal(row.aggregateid),
        literal(row.type),
        literal(row.payload),
        literal(row.traceparent),
        literal(row.headers),
        b"%d" % row.schema_version,
        b"'%s'::timestamptz" % row.created_at.isoformat().encode("ascii"),
    )


# SQLAlchemy's connection events, on every Engine: where the waiting rows go.
@event.listens_for(Engine, "commit")
def _on_commit(conn: Connection) -> None:
    _write_waiting(conn, commit=True)


@event.listens_for(Engine, "prepare_twophase")
def _on_prepare(conn: Connection, xid: Any) -> None:
    _write_waiting(conn, commit=False)


@event.listens_for(Engine, "savepoint")
def _on_savepoint(conn: Connection, name: str) -> None:
    _write_waiting(conn, commit=False)


@event.listens_for(Engine, "rollback_savepoint")
def _on_rollback_savepoint(conn: Connection, name: str, context: Any) -> None:
    conn.info.pop(_PENDING, None)


@event.listens_for(Engine, "rollback")
def _on_rollback(conn: Connection) -> None:
    conn.info.pop(_PENDING, None)
