"""Riding out outages: bounded exponential backoff for a micro-batch's inbox transactions (on
the executors) and for restarting a failed query (in the driver). Pure: the clock and the sleep
are parameters, so the policy is tested without waiting."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")
log = logging.getLogger("outboxkit.consumers")


@dataclass(frozen=True)
class Backoff:
    """Delays of first, first*factor, ... capped at ``cap``; retrying stops once ``budget``
    seconds have passed since the first failure (0: never retry)."""

    first: float = 0.5
    factor: float = 2.0
    cap: float = 15.0
    budget: float = 300.0

    def delays(self) -> Iterator[float]:
        """The delays before each retry (endless: the budget bounds them)."""
        delay = self.first
        while True:
            yield delay
            delay = min(delay * self.factor, self.cap)


# A database restart or failover takes seconds; five minutes covers a slow one without hiding a
# database that is gone (the query then fails, and the runner's own restarts take over).
BATCH_RETRY = Backoff(first=0.5, factor=2.0, cap=15.0, budget=300.0)
# Restarting a failed query from its checkpoint: up to QUERY_RESTARTS times within a window.
QUERY_RESTART = Backoff(first=1.0, factor=2.0, cap=60.0)  # bounded by RestartBudget
QUERY_RESTARTS = 10
QUERY_RESTART_WINDOW = 600.0  # seconds: a query failing more often than this ends the driver


def retrying(
    call: Callable[[], T],
    *,
    retryable: Callable[[BaseException], bool],
    backoff: Backoff = BATCH_RETRY,
    what: str = "call",
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[T, int]:
    """``call()``, retried after each ``retryable`` error with ``backoff`` until its budget is
    spent (then the last error is raised); returns the result and how many retries it took."""
    started: float | None = None
    delays = backoff.delays()
    retries = 0
    while True:
        try:
            return call(), retries
        except Exception as exc:
            now = clock()
            started = now if started is None else started
            if not retryable(exc) or now - started >= backoff.budget:
                raise
            delay = min(next(delays), max(backoff.budget - (now - started), 0.0))
            retries += 1
            log.warning(
                "%s: %s: %s; retry %d in %.1fs",
                what,
                type(exc).__name__,
                str(exc).splitlines()[0] if str(exc) else "",
                retries,
                delay,
            )
            sleep(delay)


@dataclass
class RestartBudget:
    """Whether a failed query may be restarted: at most ``limit`` restarts within ``window``
    seconds, each after the next delay of ``backoff``."""

    limit: int = QUERY_RESTARTS
    window: float = QUERY_RESTART_WINDOW
    backoff: Backoff = QUERY_RESTART
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        self._restarts: list[float] = []
        self._delays = self.backoff.delays()

    def next_delay(self) -> float | None:
        """The delay before the next restart, or None when the budget is spent."""
        now = self.clock()
        self._restarts = [t for t in self._restarts if now - t < self.window]
        if len(self._restarts) >= self.limit:
            return None
        if not self._restarts:  # failures far apart start over from the first delay
            self._delays = self.backoff.delays()
        self._restarts.append(now)
        return next(self._delays)
