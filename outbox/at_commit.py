"""Delete mode's write at commit: an event's outbox row travels in the round trip that commits
its transaction, instead of one round trip of its own.

psycopg 3 sends BEGIN, every statement and COMMIT each in a round trip of its own, so a service
transaction of one business statement took three and the outbox's own statement a fourth
(with Postgres a network hop away, the fourth cost a fifth of the transaction rate). In delete
mode nothing is ever visible of an outbox row inside its transaction (it is deleted as it is
inserted: only the WAL keeps it), so the row can wait until COMMIT and be written just ahead of
it, in one simple-protocol message ("SELECT outbox_write_deleted(...); COMMIT"): its values
are literals escaped by libpq (``PQescapeLiteral``, which knows the connection's encoding), no
parameter adaptation, no round trip.

The calls (built at publish: an encoding error is the publish's) wait in the pooled
connection's ``info``, tied to the SQLAlchemy transaction they were published in (weakly), and
SQLAlchemy's connection events, listened to on each engine given to `attach`, move them:
- at the transaction's commit they are sent ahead of COMMIT; before PREPARE TRANSACTION, or
  before a two-phase transaction's plain COMMIT, they are written at once;
- at a savepoint's start they are written at once, so that a savepoint rolled back takes with it
  exactly what was published inside it: at its rollback the rows waiting are dropped;
- at the transaction's rollback they are dropped;
- any other write of the outbox in the transaction (another mode, the driver not psycopg 3)
  writes them first (`flush`), so that events keep their order in the WAL.
When the server refuses the message (the function missing before the migrations ran, a
deferred constraint), the commit raises the error and the transaction is rolled back: its
business rows are not kept either. A transaction committed behind SQLAlchemy's back (the DBAPI
connection's own ``commit()``, or a pool whose ``reset_on_return`` commits) would not write them:
its rows are dropped with an error in the log when the connection is next used for publishing.

Only the engines given to `attach` get the listeners (the framework attaches the engines it
publishes through); another engine of the process is left as it was. A session on an engine
not attached writes its rows at publish, as ``at_commit=False`` does, and the first such publish
logs a warning naming the engine: the event is never held for a commit no listener would see.
Attaching on a first publish instead would add listeners to an engine other threads may be
committing on, which SQLAlchemy does not allow (a listener collection changed while it runs).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import psycopg
from psycopg import generators, pq
from sqlalchemy import Connection, Engine, event
from sqlalchemy.engine.base import OptionEngine
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.orm import Session
from sqlalchemy.util import await_only

from outbox.statements import WRITE_DELETED_ONE, Row, as_sqlalchemy_errors

log = logging.getLogger(__name__)

AnyEngine = TypeVar("AnyEngine", Engine, AsyncEngine)

_PENDING = "outboxkit.outbox_at_commit"  # the key of the waiting calls in the pool's info
_CALL = b"SELECT outbox_write_deleted(%s::uuid, %s, %s, %s, %s::jsonb, %s, %s::jsonb, %s, %s)"
_DONE = (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK)

_ATTACHED: weakref.WeakSet[Engine] = weakref.WeakSet()  # engines whose events write the rows
_WARNED: weakref.WeakSet[Engine] = weakref.WeakSet()  # engines not attached, already logged
_ATTACHING = threading.Lock()


@dataclass
class _Pending:
    """The calls waiting for the commit of one SQLAlchemy transaction."""

    # The connection's root Transaction they were published in, weakly: a transaction abandoned
    # without close must not keep its connection from the garbage collector, and a dead
    # reference never matches a later transaction.
    transaction: weakref.ref[Any]
    first: Row  # the first row, named in an error
    calls: list[bytes] = field(default_factory=list)


def defer(session: Session, rows: Sequence[Row]) -> bool:
    """Keep delete-mode ``rows`` for the commit of ``session``'s transaction. False when they
    cannot wait (the driver is not psycopg 3, or the connection autocommits): the caller writes
    them now. The calls are built here, so that what the client can get wrong (the text's
    encoding) fails the publish, and the commit fails only on what the server says."""
    if not rows:  # publish_many([]): nothing to write, nothing to wait for
        return True
    conn = session.connection()
    pooled = conn.connection
    driver = pooled.driver_connection
    if not isinstance(driver, psycopg.Connection | psycopg.AsyncConnection) or driver.autocommit:
        return False
    engine = _root(conn.engine)
    if engine not in _ATTACHED:
        _not_attached(engine)
        return False
    calls = _calls(driver, rows)
    root = conn.get_transaction()
    pending: _Pending | None = pooled.info.get(_PENDING)
    if pending is None or pending.transaction() is not root:
        _drop_stale(pending)
        pending = pooled.info[_PENDING] = _Pending(weakref.ref(root), rows[0])
    pending.calls.extend(calls)
    return True


def attach(engine: AnyEngine) -> AnyEngine:
    """Listen on ``engine`` for delete mode's write at commit; returns it. Idempotent. Call it
    where the engine is made, before it is used: SQLAlchemy does not allow adding a listener
    while another thread runs that event.

    Args:
        engine: An engine sessions publish through (an AsyncEngine: its sync engine, whose
            events its AsyncSessions fire); the engines its ``execution_options`` make share
            its listeners.
    """
    root = _root(engine.sync_engine if isinstance(engine, AsyncEngine) else engine)
    with _ATTACHING:
        if root not in _ATTACHED:
            for name, listener in _LISTENERS:
                event.listen(root, name, listener)
            _ATTACHED.add(root)
    return engine


def is_attached(engine: Engine) -> bool:
    """Whether sessions on ``engine`` write delete mode's rows at commit."""
    return _root(engine) in _ATTACHED


def _root(engine: Engine) -> Engine:
    """The engine ``engine.execution_options(...)`` was made from: it shares its listeners."""
    while isinstance(engine, OptionEngine):
        engine = engine._proxied
    return engine


def _not_attached(engine: Engine) -> None:
    if engine not in _WARNED:
        _WARNED.add(engine)
        log.warning(
            "outbox events published through %r are written at publish, one round trip of "
            "their own: call outbox.attach_at_commit(engine) where the engine is made to write "
            "them with COMMIT",
            engine,
        )


def flush(session: Session) -> None:
    """Write the rows waiting in ``session``'s transaction now (before another outbox write)."""
    if session.in_transaction():
        _write_waiting(session.connection(), commit=False)


def _take(conn: Connection) -> _Pending | None:
    """The calls waiting for ``conn``'s transaction, no longer waiting."""
    pending: _Pending | None = conn.info.pop(_PENDING, None)
    if pending is None or not pending.calls:
        return None
    if pending.transaction() is not conn.get_transaction():
        _drop_stale(pending)
        return None
    return pending


def _drop(conn: Connection) -> None:
    """Forget the calls waiting for ``conn``'s transaction (rolled back). Nothing to do on an
    invalidated connection: its pool record's info goes with the DBAPI connection."""
    if not (conn.invalidated or conn.closed):
        conn.info.pop(_PENDING, None)


def _drop_stale(pending: _Pending | None) -> None:
    if pending is not None and pending.calls:
        log.error(
            "%d outbox event(s) of a transaction that ended without a commit or rollback "
            "through SQLAlchemy were dropped (commit with the Session or Connection, not the "
            "DBAPI connection)",
            len(pending.calls),
        )


def _write_waiting(conn: Connection, *, commit: bool) -> None:
    """Write the rows waiting for ``conn``'s transaction, then COMMIT in the same message when
    ``commit`` (the driver's own commit then finds the transaction ended and does nothing)."""
    if conn.invalidated or conn.closed:
        return  # SQLAlchemy raises its own error for the commit or savepoint
    pending = _take(conn)
    if pending is None:
        return
    driver = conn.connection.driver_connection
    if isinstance(driver, psycopg.AsyncConnection):
        # An AsyncSession's events fire in SQLAlchemy's greenlet: await the driver from here.
        await_only(run_async(driver, pending.calls, pending.first, commit=commit))
    else:
        run(cast(psycopg.Connection[Any], driver), pending.calls, pending.first, commit=commit)


def run(
    driver: psycopg.Connection[Any], calls: Sequence[bytes], first: Row, *, commit: bool
) -> None:
    """Send ``calls`` (and COMMIT after them when ``commit``) in one simple-protocol message on
    ``driver``; a failure is raised as SQLAlchemy's error of it (an unreachable database as
    OperationalError, as through ``session.execute``). When the message fails with ``commit``,
    the transaction is rolled back before the error is raised: SQLAlchemy takes a failed commit
    for an ended transaction and never rolls it back, and its connection would go back to the
    pool inside a failed transaction."""
    pgconn = driver.pgconn
    message, commit = _message(pgconn, calls, commit=commit)
    with as_sqlalchemy_errors((WRITE_DELETED_ONE, tuple(first))), driver.lock:
        pgconn.send_query(message)
        error = _failure(driver, driver.wait(generators.execute(pgconn)))
        if error is None:
            return
        if commit and pgconn.transaction_status != pq.TransactionStatus.IDLE:
            with contextlib.suppress(psycopg.Error):  # a lost connection is invalidated later
                pgconn.send_query(b"ROLLBACK")
                driver.wait(generators.execute(pgconn))
        raise error


async def run_async(
    driver: psycopg.AsyncConnection[Any], calls: Sequence[bytes], first: Row, *, commit: bool
) -> None:
    """`run` on psycopg's asynchronous connection (an AsyncSession's): the same message, the
    same errors, the same rollback of a failed commit."""
    pgconn = driver.pgconn
    message, commit = _message(pgconn, calls, commit=commit)
    with as_sqlalchemy_errors((WRITE_DELETED_ONE, tuple(first))):
        async with driver.lock:
            pgconn.send_query(message)
            error = _failure(driver, await driver.wait(generators.execute(pgconn)))
            if error is None:
                return
            if commit and pgconn.transaction_status != pq.TransactionStatus.IDLE:
                with contextlib.suppress(psycopg.Error):
                    pgconn.send_query(b"ROLLBACK")
                    await driver.wait(generators.execute(pgconn))
        raise error


def _message(pgconn: Any, calls: Sequence[bytes], *, commit: bool) -> tuple[bytes, bool]:
    """The message of ``calls`` (with COMMIT after them when ``commit``) and whether it
    commits."""
    if commit and pgconn.transaction_status == pq.TransactionStatus.IDLE:
        # Nothing but the events was sent (psycopg's BEGIN goes with the first statement): the
        # message alone is one implicit transaction, and a COMMIT would only draw a warning.
        commit = False
    return b"; ".join([*calls, b"COMMIT"] if commit else calls), commit


def _failure(driver: Any, results: Sequence[Any]) -> psycopg.Error | None:
    """The error of the first result that failed, or None."""
    failed = next((r for r in results if r.status not in _DONE), None)
    if failed is None:
        return None
    return psycopg.errors.error_from_result(failed, encoding=driver.info.encoding)


def _calls(
    driver: psycopg.Connection[Any] | psycopg.AsyncConnection[Any], rows: Sequence[Row]
) -> list[bytes]:
    """Each row's ``SELECT outbox_write_deleted(...)`` with its values as literals: the id and
    the time are ASCII this module wrote (no escaping needed), the text is escaped by libpq
    for the connection. Validation already refused NUL characters and lone surrogates, which no
    literal could carry. A SQL_ASCII database gets UTF-8, as psycopg sends it text."""
    escape = pq.Escaping(driver.pgconn).escape_literal
    encoding = driver.info.encoding
    if encoding == "ascii":
        encoding = "utf-8"

    def literal(value: str | None) -> bytes:
        return b"NULL" if value is None else bytes(escape(value.encode(encoding)))

    return [
        _CALL
        % (
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
        for row in rows
    ]


# SQLAlchemy's connection events, on each engine given to `attach`: where the waiting rows go.
def _on_commit(conn: Connection) -> None:
    _write_waiting(conn, commit=True)


def _on_prepare(conn: Connection, xid: Any) -> None:
    _write_waiting(conn, commit=False)


def _on_commit_twophase(conn: Connection, xid: Any, is_prepared: bool) -> None:
    if not is_prepared:  # committed without PREPARE: a plain COMMIT follows
        _write_waiting(conn, commit=False)


def _on_savepoint(conn: Connection, name: str) -> None:
    _write_waiting(conn, commit=False)


def _on_rollback_savepoint(conn: Connection, name: str, context: Any) -> None:
    _drop(conn)


def _on_rollback(conn: Connection) -> None:
    _drop(conn)


def _on_rollback_twophase(conn: Connection, xid: Any, is_prepared: bool) -> None:
    _drop(conn)


_LISTENERS: tuple[tuple[str, Any], ...] = (
    ("commit", _on_commit),
    ("prepare_twophase", _on_prepare),
    ("commit_twophase", _on_commit_twophase),
    ("savepoint", _on_savepoint),
    ("rollback_savepoint", _on_rollback_savepoint),
    ("rollback", _on_rollback),
    ("rollback_twophase", _on_rollback_twophase),
)
