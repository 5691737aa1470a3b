"""kill -9 of the Kafka Connect worker while events stream: nothing lost, and what a
read_committed consumer sees twice, with KIP-618 exactly-once source and without it."""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter

import pytest

from tests.streaming import RESUME_RESENDS, seen_twice, stream_with_faults

EVENTS = 20_000


def stream_with_kills(stack, engine, aggregate_type: str, kills: int, seed: int) -> Counter:
    rng = random.Random(seed)

    def kill_connect(written: int) -> None:
        pid = stack.state.connect.pid
        os.kill(pid, signal.SIGKILL)
        print(f"killed connect (pid {pid}) at {written} events written")
        stack.up()  # starts a new worker; the connector resumes from its last flushed offset

    return stream_with_faults(
        stack,
        engine,
        aggregate_type,
        events=EVENTS,
        points=[rng.uniform(0.1, 0.8) for _ in range(kills)],
        fault=kill_connect,
    )


def check_nothing_lost(counts: Counter, kills: int, *, exactly_once: bool) -> int:
    """Every event arrived; returns how many a read_committed consumer saw a second time."""
    twice = seen_twice(counts)
    mode = "exactly-once source" if exactly_once else "at-least-once source"
    print(f"{mode}, {kills} kill(s): {len(counts)} distinct events, {twice} seen twice")
    assert len(counts) == EVENTS
    return twice


def test_connect_kill_with_exactly_once_source_loses_nothing_and_repeats_no_more_than_a_resume(
    stack, engine, aggregate_type
):
    counts = stream_with_kills(stack, engine, aggregate_type, kills=1, seed=time.time_ns())
    assert check_nothing_lost(counts, 1, exactly_once=True) <= RESUME_RESENDS


def test_connect_kill_with_at_least_once_source_loses_nothing(
    at_least_once_stack, engine, aggregate_type
):
    """Without KIP-618 the worker re-sends what it had not flushed: the inbox's event-id window
    is what absorbs those (the count is printed; it is not zero except by luck)."""
    counts = stream_with_kills(
        at_least_once_stack, engine, aggregate_type, kills=1, seed=time.time_ns()
    )
    check_nothing_lost(counts, 1, exactly_once=False)


@pytest.mark.slow
@pytest.mark.parametrize("round_", range(3))
def test_repeated_connect_kills_lose_nothing(stack, engine, aggregate_type, round_):
    counts = stream_with_kills(stack, engine, aggregate_type, kills=3, seed=round_)
    assert check_nothing_lost(counts, 3, exactly_once=True) <= 3 * RESUME_RESENDS
