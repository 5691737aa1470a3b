"""kill -9 of the Kafka Connect worker while events stream: nothing lost, re-sends counted."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections import Counter

import pytest
from sqlalchemy.orm import Session

import outbox
from cdc.config import topic_for
from outbox.record import header_map
from outboxkit.kafka import read_records

EVENTS, PER_TRANSACTION = 20_000, 20


def stream_with_kills(stack, engine, aggregate_type: str, kills: int, seed: int) -> Counter:
    rng = random.Random(seed)
    written = 0
    done = threading.Event()
    failure: list[BaseException] = []

    def writer() -> None:
        nonlocal written
        try:
            for start in range(0, EVENTS, PER_TRANSACTION):
                with Session(engine) as session, session.begin():
                    for n in range(start, start + PER_TRANSACTION):
                        outbox.publish(
                            session,
                            aggregate_type=aggregate_type,
                            aggregate_id=f"agg-{n % 64}",
                            event_type="Tick",
                            payload={"n": n},
                        )
                written = start + PER_TRANSACTION
        except BaseException as exc:  # surfaced by the test thread below
            failure.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    kill_points = sorted(rng.uniform(0.1, 0.8) * EVENTS for _ in range(kills))
    for point in kill_points:
        while written < point and not done.is_set():
            time.sleep(0.01)
        pid = stack.state.connect.pid
        os.kill(pid, signal.SIGKILL)
        print(f"killed connect (pid {pid}) at {written} events written")
        stack.up()  # starts a new worker; the connector resumes from its last flushed offset
    thread.join(timeout=600)
    assert not failure, failure
    records = read_records(
        stack.bootstrap_servers(),
        [topic_for(aggregate_type)],
        until=lambda got: len({header_map(r.headers)["id"] for r in got}) >= EVENTS,
        timeout=600,
        idle_after_done=5.0,
    )
    return Counter(header_map(r.headers)["id"] for r in records)


def check_nothing_lost(counts: Counter, kills: int) -> None:
    resent = sum(counts.values()) - len(counts)
    print(
        f"{kills} kill(s): {len(counts)} distinct events, {resent} re-sent "
        f"(at-least-once; the inbox absorbs these)"
    )
    assert len(counts) == EVENTS


def test_connect_kill_during_stream_loses_nothing(stack, engine, aggregate_type):
    counts = stream_with_kills(stack, engine, aggregate_type, kills=1, seed=time.time_ns())
    check_nothing_lost(counts, 1)


@pytest.mark.slow
@pytest.mark.parametrize("round_", range(3))
def test_repeated_connect_kills_lose_nothing(stack, engine, aggregate_type, round_):
    counts = stream_with_kills(stack, engine, aggregate_type, kills=3, seed=round_)
    check_nothing_lost(counts, 3)
