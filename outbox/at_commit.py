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

The calls (built at publish: an encoding error is the publish's; built again at commit if the
transaction changed its client encoding since) wait in the pooled connection's ``info``, tied to
the SQLAlchemy transaction they were published in (weakly), and SQLAlchemy's connection events,
listened to on each engine given to `attach`, move them:
- at the transaction's commit they are sent ahead of COMMIT; before PREPARE TRANSACTION, or
  before a two-phase transaction's plain COMMIT, they are written at once;
- at a savepoint's start they are written at once, so that a savepoint rolled back takes with it
  exactly what was published inside it: at its rollback the rows waiting are dropped;
- at the transaction's rollback they are dropped;
- any other write of the outbox in the transaction (another mode, the driver not psycopg 3)
  writes them first (`flush`), so that events keep their order in the WAL;
- a statement run through SQLAlchemy that ends or splits the transaction as SQL text
  (``SAVEPOINT``, ``COMMIT``, ``PREPARE TRANSACTION``; ``ROLLBACK [TO SAVEPOINT]``) is treated as
  the event it names: the rows are written before it, or dropped;
- inside a savepoint psycopg's own ``transaction()`` opened (which SQLAlchemy does not see),
  events are written at publish: that savepoint's rollback takes them with it. Events already
  waiting when it opened would then follow them in the WAL: such a publish is refused.
Rows written before the transaction's first statement (a publish, then a savepoint) go with a
BEGIN, psycopg's own: they are never a transaction of their own.
When the server refuses the message (the function missing before the migrations ran, a
deferred constraint), the commit raises the error and the transaction is rolled back: its
business rows are not kept either. When the connection is lost on the way (the server ended an
idle transaction, a network failure) or the commit is interrupted (a cancelled task, a request
timeout), the connection is invalidated, never given back to the pool in a transaction: the
commit's outcome is unknown, as any lost commit's (a lost connection raises an error
`outboxkit.kernel.errors.is_transient` calls an outage). A transaction committed behind
SQLAlchemy's back (the DBAPI connection's own ``commit()``, or a pool whose ``reset_on_return``
commits) would not write them: its rows are dropped with an error in the log when the
connection is next used for publishing. A statement that opens or ends a savepoint in the middle
of a multi-statement text is not seen either: open it in a statement of its own.

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
from psycopg import pq
from sqlalchemy import Connection, Engine, event
from sqlalchemy.engine.base import OptionEngine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.orm import Session
from sqlalchemy.util import await_only

from outbox import wire
from outbox.statements import Row
from outbox.wire import calls_of
from outboxkit.kernel.errors import OutboxError

log = logging.getLogger(__name__)

AnyEngine = TypeVar("AnyEngine", Engine, AsyncEngine)

_PENDING = "outboxkit.outbox_at_commit"  # the key of the waiting calls in the pool's info

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
    encoding: str  # the client encoding the calls were built in
    rows: list[Row] = field(default_factory=list)
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
    if driver._num_transactions:  # inside psycopg's transaction(): a savepoint we cannot see
        _refuse_behind(pooled.info.get(_PENDING), conn.get_transaction())
        return False
    engine = _root(conn.engine)
    if engine not in _ATTACHED:
        _not_attached(engine)
        return False
    encoding = driver.info.encoding
    calls = calls_of(driver, rows, encoding)
    root = conn.get_transaction()
    pending: _Pending | None = pooled.info.get(_PENDING)
    if pending is None or pending.transaction() is not root or pending.encoding != encoding:
        if pending is not None and pending.transaction() is root:  # the encoding changed
            calls = calls_of(driver, [*pending.rows, *rows], encoding)
            rows = [*pending.rows, *rows]
        else:
            _drop_stale(pending)
        pending = pooled.info[_PENDING] = _Pending(weakref.ref(root), encoding)
    pending.rows.extend(rows)
    pending.calls.extend(calls)
    return True


def _refuse_behind(pending: _Pending | None, root: Any) -> None:
    """Refuse an event published inside psycopg's own savepoint after events of the same
    transaction began waiting for the commit: written now it would go ahead of them in the
    WAL, and they cannot be written before a savepoint already open."""
    if pending is not None and pending.calls and pending.transaction() is root:
        raise OutboxError(
            "an event published inside a savepoint of psycopg's transaction() would be written "
            "ahead of the events its transaction published before that savepoint (they wait "
            "for the commit): open the savepoint with SQLAlchemy (session.begin_nested()), or "
            "publish with Outbox(at_commit=False)"
        )


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
    ``commit`` (the driver's own commit then finds the transaction ended and does nothing).
    A connection lost on the way, or a write interrupted (a cancelled task), is invalidated:
    it never goes back to the pool inside a transaction."""
    if conn.invalidated or conn.closed:
        return  # SQLAlchemy raises its own error for the commit or savepoint
    pending = _take(conn)
    if pending is None:
        return
    driver: Any = conn.connection.driver_connection
    try:
        calls = _current_calls(driver, pending, commit=commit)
        if isinstance(driver, psycopg.AsyncConnection):
            # An AsyncSession's events fire in SQLAlchemy's greenlet: await the driver here.
            await_only(wire.run_async(driver, calls, pending.rows[0], commit=commit))
        else:
            wire.run(cast(psycopg.Connection[Any], driver), calls, pending.rows[0], commit=commit)
    except DBAPIError as exc:
        if driver.closed or driver.pgconn.status == pq.ConnStatus.BAD:
            exc.connection_invalidated = True  # an outage: the caller answers 503, retries
            conn.invalidate(exc)
        raise
    except Exception:
        raise
    except BaseException:  # cancelled, interrupted: the transaction's state is unknown
        conn.invalidate()
        raise


def _current_calls(driver: Any, pending: _Pending, *, commit: bool) -> list[bytes]:
    """The waiting calls, built again when the transaction changed its client encoding after
    they were published (``SET LOCAL client_encoding``); an event the new encoding cannot carry
    fails the write (and, at commit, the transaction)."""
    encoding = driver.info.encoding
    if encoding == pending.encoding:
        return pending.calls
    try:
        return calls_of(driver, pending.rows, encoding)
    except UnicodeEncodeError as exc:
        named = driver.info.parameter_status("client_encoding") or encoding
        if commit:
            _rollback(driver)
        raise OutboxError(
            f"event {pending.rows[0].id} cannot be written in the client encoding {named} its "
            f"transaction set after publishing it ({exc.reason}): publish after setting it"
        ) from None


def _rollback(driver: Any) -> None:
    """Roll back the driver's transaction (a failed commit: SQLAlchemy will not)."""
    with contextlib.suppress(psycopg.Error):
        if isinstance(driver, psycopg.AsyncConnection):
            await_only(driver.rollback())
        else:
            driver.rollback()


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


_WRITE_BEFORE = ("SAVEPOINT", "COMMIT", "END", "PREPARE TRANSACTION")
_DROP_AT = ("ROLLBACK", "ABORT")  # the transaction's rollback, or back to a savepoint


def _on_statement(
    conn: Connection, cursor: Any, statement: str, parameters: Any, context: Any, many: bool
) -> None:
    """A statement about to run: SQL text that opens a savepoint or ends the transaction moves
    the waiting rows as SQLAlchemy's own savepoint or commit would (every savepoint writes them,
    so those still waiting came after the last one: a rollback to any savepoint drops them)."""
    if _PENDING not in conn.info:
        return
    head = statement.lstrip()[:20].upper()
    if head.startswith(_WRITE_BEFORE):
        _write_waiting(conn, commit=False)
    elif head.startswith(_DROP_AT):
        _drop(conn)


_LISTENERS: tuple[tuple[str, Any], ...] = (
    ("before_cursor_execute", _on_statement),
    ("commit", _on_commit),
    ("prepare_twophase", _on_prepare),
    ("commit_twophase", _on_commit_twophase),
    ("savepoint", _on_savepoint),
    ("rollback_savepoint", _on_rollback_savepoint),
    ("rollback", _on_rollback),
    ("rollback_twophase", _on_rollback_twophase),
)
