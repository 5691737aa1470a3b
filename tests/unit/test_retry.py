"""The retry and wait policy (outboxkit.kernel.retry) and the consumers' use of it (a fake clock,
sleep)."""

from __future__ import annotations

import pytest
from sqlalchemy.exc import IntegrityError, OperationalError, PendingRollbackError

from outboxkit.kernel.errors import is_transient
from outboxkit.kernel.retry import WaitTimeout, wait_until
from spark_consumers.retry import Backoff, RestartBudget, retrying


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def down(n: int):
    """A call failing ``n`` times with a connection error, then answering."""
    calls = {"n": 0}

    def call() -> str:
        calls["n"] += 1
        if calls["n"] <= n:
            raise OperationalError("SELECT 1", {}, ConnectionRefusedError("connection refused"))
        return "applied"

    return call


def test_an_outage_is_retried_with_exponential_backoff_until_it_ends():
    clock = Clock()
    backoff = Backoff(first=0.5, factor=2, cap=4, budget=60)
    result, retries = retrying(
        down(6), retryable=is_transient, backoff=backoff, clock=clock, sleep=clock.sleep
    )
    assert (result, retries) == ("applied", 6)
    assert clock.slept == [0.5, 1, 2, 4, 4, 4]


def test_retrying_stops_when_the_budget_is_spent_and_raises_the_last_error():
    clock = Clock()
    backoff = Backoff(first=1, factor=2, cap=8, budget=10)
    with pytest.raises(OperationalError):
        retrying(down(100), retryable=is_transient, backoff=backoff, clock=clock, sleep=clock.sleep)
    assert sum(clock.slept) == 10  # the last delay is cut to the budget
    assert clock.slept == [1, 2, 4, 3]


def test_an_error_retrying_cannot_fix_is_raised_at_once():
    clock = Clock()

    def bug() -> None:
        raise IntegrityError("INSERT", {}, ValueError("duplicate key"))

    with pytest.raises(IntegrityError):
        retrying(bug, retryable=is_transient, clock=clock, sleep=clock.sleep)
    assert clock.slept == []


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (OperationalError("x", {}, ConnectionRefusedError()), True),
        (PendingRollbackError("Can't reconnect until invalid transaction is rolled back"), True),
        (IntegrityError("x", {}, ValueError()), False),
        (ValueError("bad data"), False),
        (TimeoutError("pool"), True),
    ],
)
def test_which_errors_are_an_outage(error, transient):
    assert is_transient(error) is transient


def test_an_outage_under_another_error_is_found_through_its_causes():
    try:
        try:
            raise OperationalError("x", {}, ConnectionResetError())
        except OperationalError as inner:
            raise RuntimeError("handler could not finish") from inner
    except RuntimeError as outer:
        assert is_transient(outer)


def test_query_restarts_back_off_and_stop_after_the_limit_within_the_window():
    clock = Clock()
    budget = RestartBudget(
        limit=3, window=100, backoff=Backoff(first=1, factor=2, cap=60), clock=clock
    )
    assert [budget.next_delay() for _ in range(3)] == [1, 2, 4]
    assert budget.next_delay() is None  # a fourth failure within 100 s: give up
    clock.now += 101  # failures far apart: a fresh budget, from the first delay
    assert budget.next_delay() == 1


def test_a_backoff_with_attempts_stops_after_that_many_calls():
    clock = Clock()
    backoff = Backoff(first=2, factor=1, cap=2, budget=60, attempts=3)
    with pytest.raises(OperationalError):
        retrying(down(5), retryable=is_transient, backoff=backoff, clock=clock, sleep=clock.sleep)
    assert clock.slept == [2, 2]


def test_jitter_lengthens_each_delay_by_at_most_its_bound():
    delays = Backoff(first=1, factor=2, cap=4, jitter=0.5).delays()
    for plain, jittered in zip([1, 2, 4, 4], delays, strict=False):
        assert plain <= jittered <= plain + 0.5


def test_wait_until_returns_what_held_and_names_what_it_gave_up_on():
    answers = iter([None, None, "RUNNING"])
    assert wait_until(lambda: next(answers), timeout=5, what="x", poll=0) == "RUNNING"
    with pytest.raises(WaitTimeout, match=r"gave up waiting for connector c after 0s \(last: 3\)"):
        wait_until(lambda: 3, until=lambda n: n > 3, timeout=0, what="connector c", poll=0)


def test_wait_until_raises_the_callers_error_and_counts_ignored_errors_as_not_yet():
    calls = {"n": 0}

    def flaky() -> bool:
        calls["n"] += 1
        if calls["n"] < 3:
            raise ConnectionRefusedError("not yet")
        return True

    def refused() -> bool:
        raise ConnectionRefusedError("not yet")

    def bug() -> bool:
        raise ValueError("bad")

    assert wait_until(flaky, timeout=5, what="x", poll=0, ignore=(OSError,))
    with pytest.raises(LookupError, match=r"gave up waiting for y after 0s \(last: not yet\)"):
        wait_until(refused, timeout=0, what="y", poll=0, ignore=(OSError,), error=LookupError)
    with pytest.raises(ValueError, match="bad"):  # any other error at once
        wait_until(bug, timeout=5, what="z", poll=0, ignore=(OSError,))
