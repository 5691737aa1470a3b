"""Scheduled messages: an event written in the caller's transaction that reaches the outbox, and
so Kafka, no earlier than its time on the database's clock.

Scheduling writes the event to ``outbox_scheduled`` (migration 0013) in the caller's transaction,
validated as a publish is, with the time it is due and, optionally, a key the caller chose.
Cancelling by that key deletes it in the caller's transaction, so "payment captured" and "cancel
the payment timeout" commit together; scheduling again under a pending key replaces it.

A releaser moves the due messages into the outbox, in the order they are due (then scheduled),
at most ``limit`` per transaction: it deletes them from ``outbox_scheduled`` and writes them
through the service's outbox (any mode) in ONE transaction, so a message is released once
whatever crashes, then travels the CDC path as any event. Several releasers may run at once (every
service replica and consumer driver runs one): a transaction-scoped advisory lock lets one of
them release at a time, which keeps the release order, and the rows' locks make a cancel that
races a release wait for it and then find nothing. A released event keeps the id it was given
when scheduled."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from outbox.statements import Row, emit_messages, execute, write_rows
from outboxkit.kernel.errors import InvalidEvent, is_transient

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_LIMIT",
    "DEFAULT_MAX_RATE",
    "DEFAULT_POLL_SECONDS",
    "Due",
    "Released",
    "Releaser",
    "cancel",
    "due_of",
    "pending",
    "release_due",
    "schedule_rows",
]

DEFAULT_LIMIT = 500  # messages per release transaction
DEFAULT_MAX_RATE = 5_000.0  # messages per second a releaser moves at most (a backlog's pace)
ERROR_PAUSE = 30.0  # the longest wait between passes that keep failing
DEFAULT_POLL_SECONDS = 1.0  # the longest a releaser sleeps (see Releaser: what it bounds)

# The advisory lock one releaser at a time holds for its transaction (any constant; this is
# hashtext('outboxkit.scheduled')).
LOCK = 1_716_251_019

SCHEDULE = (
    "INSERT INTO outbox_scheduled (id, aggregatetype, aggregateid, type, payload, traceparent, "
    "headers, schema_version, deliver_at, key) "
    "SELECT e.id, e.aggregatetype, e.aggregateid, e.type, e.payload, e.traceparent, e.headers, "
    "e.schema_version, COALESCE(e.at, now() + make_interval(secs => e.delay)), e.key "
    "FROM unnest(CAST(%s AS uuid[]), CAST(%s AS text[]), CAST(%s AS text[]), CAST(%s AS text[]), "
    "CAST(%s AS jsonb[]), CAST(%s AS text[]), CAST(%s AS jsonb[]), CAST(%s AS int[]), "
    "CAST(%s AS timestamptz[]), CAST(%s AS float8[]), CAST(%s AS text[])) WITH ORDINALITY "
    "AS e(id, aggregatetype, aggregateid, type, payload, traceparent, headers, schema_version, "
    "at, delay, key, n) ORDER BY e.n "
    "ON CONFLICT (key) WHERE key IS NOT NULL DO UPDATE SET id = EXCLUDED.id, "
    "aggregatetype = EXCLUDED.aggregatetype, aggregateid = EXCLUDED.aggregateid, "
    "type = EXCLUDED.type, payload = EXCLUDED.payload, traceparent = EXCLUDED.traceparent, "
    "headers = EXCLUDED.headers, schema_version = EXCLUDED.schema_version, "
    "deliver_at = EXCLUDED.deliver_at, created_at = now()"
)
CANCEL = text("DELETE FROM outbox_scheduled WHERE key = ANY(CAST(:keys AS text[]))")
TRY_LOCK = text("SELECT pg_try_advisory_xact_lock(:lock), now()")
# The due messages, oldest first; SKIP LOCKED passes a row a cancelling or replacing transaction
# holds (it is released on a later pass, if still there).
RELEASE = text(
    "WITH due AS (SELECT id FROM outbox_scheduled WHERE deliver_at <= :now "
    "ORDER BY deliver_at, seq LIMIT :limit FOR UPDATE SKIP LOCKED) "
    "DELETE FROM outbox_scheduled s USING due WHERE s.id = due.id "
    "RETURNING s.id, s.aggregatetype, s.aggregateid, s.type, CAST(s.payload AS text) AS payload, "
    "s.traceparent, CAST(s.headers AS text) AS headers, s.schema_version, s.deliver_at, s.seq"
)
NEXT_DUE = text("SELECT min(deliver_at) FROM outbox_scheduled")


@dataclass(frozen=True)
class Due:
    """When a scheduled message is due: at ``at`` (an aware datetime) or ``delay`` seconds after
    the scheduling transaction's start, both on the database's clock.

    Attributes:
        at: The time it is due (timezone-aware), or None.
        delay: Seconds after the transaction's start (``now()``), or None.
        key: The caller's name for it, unique among the pending messages: a later transaction
            cancels it (`cancel`) or replaces it (scheduling again under the key); None: none.
    """

    at: datetime | None = None
    delay: float | None = None
    key: str | None = None


def due_of(at: datetime | None, delay: float | timedelta | None, key: str | None = None) -> Due:
    """Check a schedule's arguments: exactly one of ``at`` (timezone-aware) and ``delay``
    (seconds or a timedelta, not negative), and a key of 1 to 255 characters or None.

    Raises:
        InvalidEvent: Neither or both given, a naive ``at``, a negative or non-finite delay, or
            a bad key.
    """
    if (at is None) == (delay is None):
        raise InvalidEvent("schedule needs exactly one of at= (a time) and delay= (seconds)")
    if at is not None and (at.tzinfo is None or at.utcoffset() is None):
        raise InvalidEvent(f"at= must be timezone-aware, got {at.isoformat()}")
    seconds = None
    if delay is not None:
        seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
        if not math.isfinite(seconds) or seconds < 0:
            raise InvalidEvent(f"delay= must be a finite number of seconds >= 0, got {delay}")
    if key is not None and not (isinstance(key, str) and 0 < len(key) <= 255):
        raise InvalidEvent(f"a schedule key is 1 to 255 characters, got {key!r}")
    return Due(at, seconds, key)


def schedule_rows(session: Session, rows: Sequence[Row], dues: Sequence[Due]) -> None:
    """Write ``rows`` to ``outbox_scheduled`` in ``session``'s transaction, each due as its
    ``dues`` says (one statement; never commits). A key pending already is replaced.

    Raises:
        InvalidEvent: Two of the rows share a key.
    """
    if not rows:
        return
    keys = [d.key for d in dues if d.key is not None]
    if len(keys) != len(set(keys)):
        raise InvalidEvent("two scheduled messages of one write share a key")
    columns = [list(column) for column in zip(*(r[:-1] for r in rows), strict=True)]
    params = (*columns, [d.at for d in dues], [d.delay for d in dues], [d.key for d in dues])
    execute(session, [(SCHEDULE, params)], one_event=False)


def cancel(session: Session, keys: Sequence[str]) -> int:
    """Delete the pending messages scheduled under ``keys`` in ``session``'s transaction; how
    many there were (a message released already is not pending: it is not counted)."""
    if not keys:
        return 0
    result: Any = session.execute(CANCEL, {"keys": list(keys)})
    return int(result.rowcount)


@dataclass(frozen=True)
class Released:
    """What one release pass did.

    Attributes:
        count: Messages moved into the outbox.
        lags: Per message, seconds from its time to its release.
        by_type: Messages released per (aggregate type, event type).
        locked_out: Another releaser held the lock: this pass released nothing.
        next_due: Seconds until the next pending message is due after this pass (negative: due
            already; None: none pending or not read).
    """

    count: int = 0
    lags: tuple[float, ...] = ()
    by_type: Counter[tuple[str, str]] = field(default_factory=Counter)
    locked_out: bool = False
    next_due: float | None = None


# Writes released rows in the service's outbox mode: ``write(session, rows)``.
Write = Callable[[Session, Sequence[Row]], None]


def writer(mode: str, message_prefix: str) -> Write:
    """How released rows are written in outbox mode ``mode`` (`outbox.publish.Outbox`)."""
    if mode == "message":
        return lambda session, rows: emit_messages(session, message_prefix, rows)
    return lambda session, rows: write_rows(session, rows, delete=mode == "delete")


def release_due(
    engine: Engine,
    write: Write,
    *,
    limit: int = DEFAULT_LIMIT,
    now: datetime | None = None,
) -> Released:
    """Move up to ``limit`` due messages into the outbox in one transaction, oldest first.

    Args:
        engine: The service's database.
        write: How rows are written to the outbox (`writer`).
        limit: The most messages moved.
        now: The time that decides what is due; None: the database's ``now()``. (A test harness
            moves time forward with it.)
    """
    with Session(engine) as session, session.begin():
        locked, db_now = session.execute(TRY_LOCK, {"lock": LOCK}).one()
        if not locked:
            return Released(locked_out=True)
        clock = db_now if now is None else now
        found = sorted(
            session.execute(RELEASE, {"now": clock, "limit": limit}).all(),
            key=lambda r: (r.deliver_at, r.seq),
        )
        rows = [
            Row(
                r.id,
                r.aggregatetype,
                r.aggregateid,
                r.type,
                r.payload,
                r.traceparent,
                r.headers,
                r.schema_version,
                db_now,
            )
            for r in found
        ]
        write(session, rows)
        following = session.execute(NEXT_DUE).scalar()
    return Released(
        count=len(rows),
        lags=tuple(max(0.0, (clock - r.deliver_at).total_seconds()) for r in found),
        by_type=Counter((r.aggregatetype, r.type) for r in found),
        next_due=None if following is None else (following - clock).total_seconds(),
    )


def pending(engine: Engine) -> dict[str, Any]:
    """The pending messages: how many, how many are due, the oldest due's age in seconds (0
    when none is due), and the next one's time."""
    query = text(
        "SELECT count(*) AS pending, count(*) FILTER (WHERE deliver_at <= now()) AS due, "
        "COALESCE(EXTRACT(EPOCH FROM now() - min(deliver_at) FILTER (WHERE deliver_at <= now()))"
        ", 0) AS oldest_due_seconds, "
        "min(deliver_at) AS next_at FROM outbox_scheduled"
    )
    with engine.connect() as conn:
        row = conn.execute(query).mappings().one()
    return {**row, "oldest_due_seconds": float(row["oldest_due_seconds"])}


class Releaser:
    """Releases due messages in a background thread until stopped: a pass, then, unless it
    released a full batch, a sleep until the next message is due, at most ``poll`` seconds. A
    message pending at the last pass is released at its time; one scheduled since, for a time
    before the next pass, waits at most ``poll`` seconds past it. Every process of a service
    runs one and each pass is a transaction, so ``poll`` is also their idle cost (1 s: one
    small transaction a second per process). A backlog (after an outage) is released in order
    at ``max_rate`` messages per second at most. An unreachable database is logged and retried
    at the next poll.

    Args:
        engine: The service's database.
        write: How rows are written to the outbox (`writer`).
        limit: Messages per transaction.
        max_rate: Messages per second at most.
        poll: The longest sleep between passes, in seconds.
        on_release: Told what each pass that released something did (metrics).
    """

    def __init__(
        self,
        engine: Engine,
        write: Write,
        *,
        limit: int = DEFAULT_LIMIT,
        max_rate: float = DEFAULT_MAX_RATE,
        poll: float = DEFAULT_POLL_SECONDS,
        on_release: Callable[[Released], None] | None = None,
        name: str = "outboxkit-releaser",
    ) -> None:
        if limit < 1 or max_rate <= 0 or poll <= 0:
            raise ValueError("a releaser needs limit >= 1, max_rate > 0 and poll > 0")
        self.engine, self.write = engine, write
        self.limit, self.max_rate, self.poll = limit, max_rate, poll
        self.on_release = on_release
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> Releaser:
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop after the pass under way (its transaction commits or rolls back)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def run_once(self) -> Released:
        """One pass (what the thread runs each time)."""
        done = release_due(self.engine, self.write, limit=self.limit)
        if done.count and self.on_release is not None:
            self.on_release(done)
        return done

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                done = self.run_once()
            except Exception as exc:
                failures += 1
                if is_transient(exc):
                    log.warning("releasing scheduled messages: %s", str(exc).splitlines()[0])
                elif failures == 1:
                    log.exception("releasing scheduled messages failed")
                # an outage or a missing migration: fewer tries, up to one each ERROR_PAUSE s
                self._stop.wait(min(ERROR_PAUSE, self.poll * 2**failures))
                continue
            failures = 0
            self._stop.wait(self._pause(done, time.monotonic() - started))

    def _pause(self, done: Released, took: float) -> float:
        """Seconds to wait after a pass that took ``took``."""
        if done.count >= self.limit:  # a backlog: go on at the bounded rate
            return max(0.0, done.count / self.max_rate - took)
        if done.next_due is None:
            return self.poll
        return min(self.poll, max(0.0, done.next_due))
