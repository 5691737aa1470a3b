"""kill -9 of the Kafka Connect worker while events stream: nothing lost, and what a
read_committed consumer sees twice, with KIP-618 exactly-once source and without it (one kill
of each in tests/faults/test_spark_faults.py, which then consumes the stream; repeated kills
here, with --slow)."""

from __future__ import annotations

import os
import random
import signal
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


# One kill -9 with exactly-once source, and one without it: the Spark fault tests stream and
# check these (tests/faults/test_spark_faults.py, `check_nothing_lost` on the same counts) before
# their consumers run, so they are not streamed a second time here.


@pytest.mark.slow
@pytest.mark.parametrize("round_", range(3))
def test_repeated_connect_kills_lose_nothing(stack, engine, aggregate_type, round_):
    counts = stream_with_kills(stack, engine, aggregate_type, kills=3, seed=round_)
    assert check_nothing_lost(counts, 3, exactly_once=True) <= 3 * RESUME_RESENDS
