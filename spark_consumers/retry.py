"""Riding out outages: the back-off for a micro-batch's inbox transactions (on the executors)
and for restarting a failed query (in the driver), on the framework's one retry policy
(`outboxkit.kernel.retry`). Pure: the clock is a parameter, so the policy is tested without
waiting."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from outboxkit.kernel.retry import Backoff, retrying

__all__ = [
    "BATCH_RETRY",
    "IDENTITY_RETRY",
    "QUERY_RESTART",
    "QUERY_RESTARTS",
    "QUERY_RESTART_WINDOW",
    "Backoff",
    "RestartBudget",
    "retrying",
]

# A database restart or failover takes seconds; five minutes covers a slow one without hiding a
# database that is gone (the query then fails, and the runner's own restarts take over).
BATCH_RETRY = Backoff(first=0.5, factor=2.0, cap=15.0, budget=300.0)
# Reading the topics' identities for a micro-batch (a broker or the controller moving): three
# reads in all, 2 s apart, each bounded by the admin client's 10 s timeout.
IDENTITY_RETRY = Backoff(first=2.0, factor=1.0, cap=2.0, budget=60.0, attempts=3)
# Restarting a failed query from its checkpoint: up to QUERY_RESTARTS times within a window.
QUERY_RESTART = Backoff(first=1.0, factor=2.0, cap=60.0)  # bounded by RestartBudget
QUERY_RESTARTS = 10
QUERY_RESTART_WINDOW = 600.0  # seconds: a query failing more often than this ends the driver


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
