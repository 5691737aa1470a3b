"""A quiet spell after a failure: for a while, a caller answers from what it last heard (when it
failed, and why) instead of asking again. Kafka's lag reader, the console's Kafka gate and its
Connect reads each keep one per endpoint, so an outage costs one timeout per spell, not one per
look."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

# How long an endpoint that failed to answer is not asked again.
QUIET_SECONDS = 15.0


@dataclass(frozen=True)
class Silence:
    """An endpoint's last failure, still within its quiet spell."""

    age: float  # seconds since it failed
    left: float  # seconds until it is asked again
    why: str


class Quiet:
    """The quiet spell of one endpoint: `failed` starts it, `answered` ends it, `silence` says
    whether it runs (and since when, why). Safe to share between threads."""

    def __init__(
        self, seconds: float = QUIET_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.seconds = seconds
        self.clock = clock
        self._failed: tuple[float, str] | None = None  # when, and why
        self._lock = threading.Lock()

    def failed(self, why: str) -> None:
        """The endpoint failed to answer now, for ``why``: not asked for ``seconds``."""
        with self._lock:
            self._failed = (self.clock(), why)

    def answered(self) -> None:
        """The endpoint answered: no spell."""
        with self._lock:
            self._failed = None

    def silence(self) -> Silence | None:
        """The running spell, else None (none started, or it is over)."""
        with self._lock:
            failed = self._failed
        if failed is None:
            return None
        age = self.clock() - failed[0]
        return Silence(age, self.seconds - age, failed[1]) if age < self.seconds else None

    @property
    def why(self) -> str | None:
        """Why the endpoint last failed, until it answers again (the spell over or not)."""
        with self._lock:
            return None if self._failed is None else self._failed[1]
