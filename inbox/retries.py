"""Delayed retries of a record whose handler failed for a passing reason (pure, no I/O): the
policy and its delays, which failures are passing, and how many retries a record's history
shows. The apply loop parks such a record as waiting to retry; the retrier (`inbox.redrives`)
redrives its key once the time has come."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from outboxkit.kernel.errors import causes

# Postgres errors a handler's statement can meet while the connection stays usable and the same
# statement may succeed later: lock_not_available (NOWAIT, lock_timeout), deadlock_detected,
# serialization_failure.
PASSING_SQLSTATES = frozenset({"55P03", "40P01", "40001"})
PASSING_TYPES: tuple[type[BaseException], ...] = (TimeoutError, ConnectionError)


class RetryLater(Exception):
    """Raised by a handler: the event cannot be applied now; the inbox retries it later.

    Args:
        message: Why (kept in the parked record's error and history).
        after: Seconds until the retry, instead of the policy's delay (it still counts as one
            of the policy's attempts).
    """

    def __init__(self, message: str = "retry later", *, after: float | None = None) -> None:
        if after is not None and not after >= 0:
            raise ValueError(f"RetryLater(after={after!r}): seconds, 0 or more")
        super().__init__(message)
        self.after = after


@dataclass(frozen=True)
class RetryPolicy:
    """When a record whose handler failed for a passing reason is tried again: after ``first``
    seconds, then each delay ``factor`` times the one before, at most ``cap``; after
    ``attempts`` delayed retries that failed it is parked for a person (``outboxkit inbox
    redrive``). The defaults retry after 1, 4, 16, 64 and 256 s: about 6 minutes in all.

    Attributes:
        attempts: Delayed retries before the record is parked for a person; 0 turns delayed
            retries off (every failure is retried at once, ``max_attempts`` times, then parked
            for a person; an unreachable-looking error in a handler retries the whole batch).
        first: Seconds before the first delayed retry.
        factor: Each delay is the one before times this (1: the same delay each time).
        cap: The longest delay, in seconds.
        transient: Exception types that are passing when a handler raises them (or one whose
            cause is of them): besides `RetryLater`, which always is.
        sqlstates: Postgres error codes that are passing when a handler's statement fails with
            them (default: lock not available, deadlock, serialization failure).
    """

    attempts: int = 5
    first: float = 1.0
    factor: float = 4.0
    cap: float = 300.0
    transient: tuple[type[BaseException], ...] = PASSING_TYPES
    sqlstates: frozenset[str] = field(default=PASSING_SQLSTATES)

    def __post_init__(self) -> None:
        if self.attempts < 0 or not self.first >= 0 or not self.factor >= 1:
            raise ValueError(f"{self}: attempts and first must be 0 or more, factor 1 or more")
        if not self.cap >= self.first:
            raise ValueError(f"{self}: cap must be at least first")

    @property
    def enabled(self) -> bool:
        """True when passing failures are retried later (``attempts`` > 0)."""
        return self.attempts > 0

    def delay(self, retry: int) -> float:
        """Seconds before delayed retry number ``retry`` (1: the first), at most ``cap``.

        Args:
            retry: Which delayed retry, counted from 1.
        """
        if retry < 1:
            raise ValueError(f"retry {retry}: delayed retries are counted from 1")
        seconds = self.first
        for _ in range(retry - 1):  # grows past the cap within a few dozen steps
            if seconds >= self.cap:
                break
            seconds *= self.factor
        return min(self.cap, seconds)

    def next_delay(self, retried: int, after: float | None = None) -> float | None:
        """Seconds until the next delayed retry of a record that failed again after
        ``retried`` of them, or None when the policy is spent (parked for a person).

        Args:
            retried: Delayed retries already made (0: the record just failed for the first
                time).
            after: The delay the handler asked for (`RetryLater`), instead of the policy's.
        """
        if retried >= self.attempts:
            return None
        return self.delay(retried + 1) if after is None else after

    def passing(self, exc: BaseException) -> bool:
        """True when ``exc``, raised by a handler, is a passing failure: `RetryLater`, one of
        ``transient``, or a Postgres error of ``sqlstates`` (looked for through the explicit
        causes, ``raise ... from``, and a driver error wrapped by SQLAlchemy). Whether the
        database connection is still usable is the caller's to check.

        Args:
            exc: The exception the handler raised.
        """
        for current in causes(exc, implicit=False):
            wrapped = getattr(current, "orig", None)  # SQLAlchemy's DBAPIError
            errors = (current, wrapped) if isinstance(wrapped, BaseException) else (current,)
            for error in errors:
                if isinstance(error, (RetryLater, *self.transient)):
                    return True
                if sqlstate(error) in self.sqlstates:
                    return True
        return False


# Delayed retries off: today's immediate attempts, then parked for a person.
NO_RETRIES = RetryPolicy(attempts=0)


def sqlstate(exc: BaseException) -> str | None:
    """The Postgres error code of a driver error (psycopg 3 ``sqlstate``, psycopg2
    ``pgcode``), else None."""
    code = getattr(exc, "sqlstate", None) or getattr(exc, "pgcode", None)
    return code if isinstance(code, str) else None


def retry_after(exc: BaseException) -> float | None:
    """The delay a `RetryLater` among ``exc``'s explicit causes asked for, else None."""
    for current in causes(exc, implicit=False):
        if isinstance(current, RetryLater):
            return current.after
    return None


def retries_made(history: Sequence[Mapping[str, Any]] | None) -> int:
    """Delayed retries a parked record was given since its last failure that was not retried
    later (the one running now included): its history's last entries that scheduled one
    (``retry_at`` set). A record parked for a person and redriven by one starts again at 0."""
    made = 0
    for entry in reversed(history or ()):
        if entry.get("retry_at") is None:
            break
        made += 1
    return made
