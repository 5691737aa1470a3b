"""Delayed retries, pure: the policy's delays and when it is spent, which failures are passing,
and how many retries a parked record's history shows."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inbox import RetryLater, RetryPolicy
from inbox.retries import NO_RETRIES, retries_made, retry_after


class PgError(Exception):
    """A driver error as psycopg 3 raises it: the SQLSTATE in ``sqlstate``."""

    def __init__(self, sqlstate: str) -> None:
        super().__init__(f"sqlstate {sqlstate}")
        self.sqlstate = sqlstate


class Wrapped(Exception):
    """A driver error as SQLAlchemy wraps it: the original in ``orig``, not as the cause."""

    def __init__(self, orig: BaseException) -> None:
        super().__init__(str(orig))
        self.orig = orig


def test_the_default_policy_waits_1_4_16_64_256_seconds_then_parks_for_a_person() -> None:
    policy = RetryPolicy()
    assert [policy.next_delay(done) for done in range(6)] == [1, 4, 16, 64, 256, None]


def test_delays_grow_by_the_factor_up_to_the_cap() -> None:
    policy = RetryPolicy(attempts=10, first=2.0, factor=3.0, cap=50.0)
    assert [policy.delay(n) for n in range(1, 7)] == [2, 6, 18, 50, 50, 50]
    assert RetryPolicy(factor=1.0).delay(5) == 1.0


@given(
    attempts=st.integers(0, 50),
    first=st.floats(0, 1e4),
    factor=st.floats(1, 100),
    spare=st.floats(0, 1e6),
    retry=st.integers(1, 10_000),
)
def test_a_delay_is_never_below_first_nor_above_cap_and_never_shrinks(
    attempts: int, first: float, factor: float, spare: float, retry: int
) -> None:
    policy = RetryPolicy(attempts=attempts, first=first, factor=factor, cap=first + spare)
    delay = policy.delay(retry)
    assert policy.first <= delay <= policy.cap
    assert policy.delay(retry + 1) >= delay


def test_the_delay_a_handler_asks_for_replaces_the_policys_but_still_counts() -> None:
    policy = RetryPolicy(attempts=2)
    assert policy.next_delay(0, after=600.0) == 600.0
    assert policy.next_delay(1, after=0.0) == 0.0
    assert policy.next_delay(2, after=5.0) is None  # spent: parked for a person


def test_attempts_0_is_todays_behaviour_every_failure_for_a_person() -> None:
    assert not NO_RETRIES.enabled and NO_RETRIES.next_delay(0) is None
    assert RetryPolicy().enabled


@pytest.mark.parametrize(
    "bad",
    [
        {"attempts": -1},
        {"first": -1.0},
        {"factor": 0.5},
        {"first": 10.0, "cap": 5.0},
        {"first": float("nan")},
    ],
)
def test_a_policy_that_makes_no_sense_is_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(**bad)  # type: ignore[arg-type]


def test_retry_later_may_ask_for_a_delay_but_not_a_negative_one() -> None:
    assert RetryLater().after is None and RetryLater("busy", after=3).after == 3
    with pytest.raises(ValueError):
        RetryLater(after=-1)


@pytest.mark.parametrize(
    "exc",
    [
        RetryLater("the warehouse is closed"),
        TimeoutError("the payment service did not answer"),
        ConnectionRefusedError("the payment service is down"),
        PgError("55P03"),  # lock not available
        PgError("40P01"),  # deadlock
        PgError("40001"),  # serialization failure
        Wrapped(PgError("40P01")),
    ],
    ids=["retry-later", "timeout", "connection", "lock", "deadlock", "serialization", "wrapped"],
)
def test_passing_failures(exc: BaseException) -> None:
    assert RetryPolicy().passing(exc)


@pytest.mark.parametrize(
    "exc",
    [
        ValueError("amount must be positive"),
        KeyError("customer"),
        PgError("23505"),  # unique violation: the data's fault
        PgError("57P01"),  # admin shutdown: the connection's, not the event's
        Wrapped(PgError("23503")),
    ],
    ids=["value", "key", "unique", "shutdown", "wrapped-fk"],
)
def test_other_failures_are_not_passing(exc: BaseException) -> None:
    assert not RetryPolicy().passing(exc)


def test_a_passing_cause_counts_only_when_raised_from_it() -> None:
    try:
        try:
            raise TimeoutError("slow")
        except TimeoutError as slow:
            raise ValueError("bad data") from slow
    except ValueError as explicit:
        assert RetryPolicy().passing(explicit)
    try:
        try:
            raise TimeoutError("slow")
        except TimeoutError:
            raise ValueError("bad data")  # noqa: B904 - a new error while handling: not passing
    except ValueError as implicit:
        assert not RetryPolicy().passing(implicit)


def test_a_policy_names_its_own_transient_types_and_codes() -> None:
    class Busy(Exception):
        pass

    policy = RetryPolicy(transient=(Busy,), sqlstates=frozenset({"53300"}))
    assert policy.passing(Busy()) and policy.passing(PgError("53300"))
    assert not policy.passing(TimeoutError()) and not policy.passing(PgError("40P01"))
    assert policy.passing(RetryLater())  # always


def test_retry_after_is_read_through_explicit_causes() -> None:
    try:
        try:
            raise RetryLater(after=7.5)
        except RetryLater as later:
            raise RuntimeError("wrapped") from later
    except RuntimeError as exc:
        assert retry_after(exc) == 7.5
    assert retry_after(TimeoutError()) is None


def test_retries_made_counts_the_last_failures_that_scheduled_a_retry() -> None:
    at = "2026-11-27T10:00:00+00:00"
    retried = {"at": at, "error": "TimeoutError", "retry_at": at}
    for_a_person = {"at": at, "error": "ValueError", "retry_at": None}
    assert retries_made(None) == 0 and retries_made([]) == 0
    assert retries_made([retried]) == 1
    assert retries_made([retried, retried, retried]) == 3
    # Parked for a person (or exhausted), then redriven by one: the count starts again.
    assert retries_made([retried, retried, for_a_person, retried]) == 1
    assert retries_made([retried, for_a_person]) == 0
