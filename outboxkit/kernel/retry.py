"""Retrying and waiting: the framework's one policy, on tenacity.

`Backoff` says how long to wait before each retry (exponential, capped, with optional jitter)
and for how long to keep trying; `retrying` calls a function again after each error worth
retrying until that budget is spent; `wait_until` polls until something holds and otherwise
raises an error naming what it waited for. The clock and the sleep are parameters, so a policy
is tested without waiting."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

import tenacity
from tenacity import nap

T = TypeVar("T")
Clock = Callable[[], float]
Sleep = Callable[[float], None]

log = logging.getLogger("outboxkit.retry")


class WaitTimeout(TimeoutError):
    """What `wait_until` waited for did not happen in time."""


@dataclass(frozen=True)
class Backoff:
    """Delays of ``first``, ``first * factor``, ... capped at ``cap``, each lengthened by up to
    ``jitter`` seconds at random; retrying stops once ``budget`` seconds have passed since the
    first failure (0: never retry), or after ``attempts`` calls in all when set."""

    first: float = 0.5
    factor: float = 2.0
    cap: float = 15.0
    budget: float = 300.0
    jitter: float = 0.0
    attempts: int | None = None

    def wait(self) -> tenacity.wait.wait_base:
        """These delays as a tenacity wait strategy (by attempt number)."""
        exponential = tenacity.wait_exponential(self.first, self.cap, self.factor)
        return exponential + tenacity.wait_random(0, self.jitter) if self.jitter else exponential

    def delay(self, retry: int) -> float:
        """The delay before retry number ``retry`` (1: the first)."""
        state = tenacity.RetryCallState(_NO_RETRY, None, (), {})
        state.attempt_number = retry
        return float(self.wait()(state))

    def delays(self) -> Iterator[float]:
        """The delays before each retry (endless: the budget bounds them)."""
        return (self.delay(retry) for retry in itertools.count(1))


_NO_RETRY = tenacity.Retrying()  # what a RetryCallState must name; `Backoff.delay` runs nothing


@dataclass
class _Budget:
    """The time left of ``backoff.budget``, counted on ``clock`` from the first failure."""

    backoff: Backoff
    clock: Clock
    started: float | None = field(default=None)

    def left(self) -> float:
        now = self.clock()
        self.started = now if self.started is None else self.started
        return self.backoff.budget - (now - self.started)

    def spent(self, state: tenacity.RetryCallState) -> bool:
        attempts = self.backoff.attempts
        return self.left() <= 0 or (attempts is not None and state.attempt_number >= attempts)

    def wait(self, state: tenacity.RetryCallState) -> float:
        """The next delay, cut to what is left of the budget."""
        return min(self.backoff.wait()(state), max(self.left(), 0.0))


def retrying(
    call: Callable[[], T],
    *,
    retryable: Callable[[BaseException], bool],
    backoff: Backoff = Backoff(),
    what: str = "call",
    clock: Clock = time.monotonic,
    sleep: Sleep | None = None,
) -> tuple[T, int]:
    """``call()``, retried after each ``retryable`` error with ``backoff`` until its budget is
    spent (then the last error is raised); returns the result and how many retries it took."""
    budget = _Budget(backoff, clock)
    retries = tenacity.Retrying(
        retry=tenacity.retry_if_exception(retryable),
        stop=budget.spent,
        wait=budget.wait,
        sleep=sleep or nap.sleep,
        before_sleep=lambda state: _warn(what, state),
        reraise=True,
    )
    result = retries(call)
    return result, retries.statistics["attempt_number"] - 1


def _warn(what: str, state: tenacity.RetryCallState) -> None:
    error = state.outcome.exception() if state.outcome is not None else None
    first_line = str(error).splitlines()[0] if str(error) else ""
    log.warning(
        "%s: %s: %s; retry %d in %.1fs",
        what,
        type(error).__name__,
        first_line,
        state.attempt_number,
        state.upcoming_sleep,
    )


@overload
def wait_until(
    probe: Callable[[], T | None],
    *,
    timeout: float,
    what: str,
    poll: float = ...,
    ignore: tuple[type[Exception], ...] = ...,
    error: Callable[[str], Exception] = ...,
    sleep: Sleep | None = ...,
) -> T: ...


@overload
def wait_until(
    probe: Callable[[], T],
    *,
    timeout: float,
    what: str,
    until: Callable[[T], bool],
    poll: float = ...,
    ignore: tuple[type[Exception], ...] = ...,
    error: Callable[[str], Exception] = ...,
    sleep: Sleep | None = ...,
) -> T: ...


def wait_until(
    probe: Callable[[], Any],
    *,
    timeout: float,
    what: str,
    until: Callable[[Any], bool] = bool,
    poll: float = 0.5,
    ignore: tuple[type[Exception], ...] = (),
    error: Callable[[str], Exception] = WaitTimeout,
    sleep: Sleep | None = None,
) -> Any:
    """Call ``probe`` every ``poll`` seconds until ``until`` holds for what it returned, and
    return that; ``ignore``: errors that count as not yet, any other is raised at once. After
    ``timeout`` seconds, ``error`` is raised with a message naming ``what`` was awaited and the
    last answer."""

    def timed_out(state: tenacity.RetryCallState) -> Any:
        outcome = state.outcome  # set: this runs after an attempt
        failed = outcome.exception() if outcome is not None and outcome.failed else None
        last = failed or (outcome.result() if outcome is not None else None)
        seen = "" if last is None or isinstance(last, bool) else f" (last: {last})"
        message = f"gave up waiting for {what} after {timeout:.0f}s{seen}"
        raise error(message) from failed

    return tenacity.Retrying(
        retry=tenacity.retry_if_not_result(until) | tenacity.retry_if_exception_type(ignore),
        stop=tenacity.stop_after_delay(timeout),
        wait=tenacity.wait_fixed(poll),
        sleep=sleep or nap.sleep,
        retry_error_callback=timed_out,
    )(probe)
