"""The message delete mode's write at commit sends (`outbox.at_commit`): each waiting event's
``SELECT outbox_write_deleted(...)`` with its values as literals libpq escaped, then COMMIT, in
one simple-protocol message on psycopg's connection (sync or async), its failure raised as
SQLAlchemy's error of it."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import generators, pq

from outbox.statements import WRITE_DELETED_ONE, Row, as_sqlalchemy_errors

_CALL = b"SELECT outbox_write_deleted(%s::uuid, %s, %s, %s, %s::jsonb, %s, %s::jsonb, %s, %s)"
_DONE = (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK)


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
    message, commit = message_of(driver, calls, commit=commit)
    with as_sqlalchemy_errors((WRITE_DELETED_ONE, tuple(first))), driver.lock:
        pgconn.send_query(message)
        error = failure(driver, driver.wait(generators.execute(pgconn)))
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
    message, commit = message_of(driver, calls, commit=commit)
    with as_sqlalchemy_errors((WRITE_DELETED_ONE, tuple(first))):
        async with driver.lock:
            pgconn.send_query(message)
            error = failure(driver, await driver.wait(generators.execute(pgconn)))
            if error is None:
                return
            if commit and pgconn.transaction_status != pq.TransactionStatus.IDLE:
                with contextlib.suppress(psycopg.Error):
                    pgconn.send_query(b"ROLLBACK")
                    await driver.wait(generators.execute(pgconn))
        raise error


def message_of(driver: Any, calls: Sequence[bytes], *, commit: bool) -> tuple[bytes, bool]:
    """The message of ``calls`` (with COMMIT after them when ``commit``) and whether it
    commits."""
    if driver.pgconn.transaction_status == pq.TransactionStatus.IDLE:
        # Nothing but the events was sent (psycopg sends BEGIN with the first statement).
        if commit:  # the message alone is one implicit transaction; COMMIT would draw a warning
            commit = False
        else:  # more follows (a savepoint, another write): begin the transaction as psycopg
            # would, with the connection's isolation level, which it reads from this command
            calls = [driver._get_tx_start_command(), *calls]
    return b"; ".join([*calls, b"COMMIT"] if commit else calls), commit


def failure(driver: Any, results: Sequence[Any]) -> psycopg.Error | None:
    """The error of the first result that failed, or None."""
    failed = next((r for r in results if r.status not in _DONE), None)
    if failed is None:
        return None
    return psycopg.errors.error_from_result(failed, encoding=driver.info.encoding)


def calls_of(
    driver: psycopg.Connection[Any] | psycopg.AsyncConnection[Any],
    rows: Sequence[Row],
    encoding: str,
) -> list[bytes]:
    """Each row's ``SELECT outbox_write_deleted(...)`` with its values as literals: the id and
    the time are ASCII this module wrote (no escaping needed), the text is escaped by libpq
    for the connection. Validation already refused NUL characters and lone surrogates, which no
    literal could carry. A SQL_ASCII database gets UTF-8, as psycopg sends it text."""
    escape = pq.Escaping(driver.pgconn).escape_literal
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
