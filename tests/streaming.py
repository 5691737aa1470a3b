"""Outbox events streamed through the stack while a fault strikes, then read back as a
read_committed consumer sees them (the fault tests on one node and on the cluster)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable

from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

import outbox
from cdc.config import topic_for
from outboxkit.kernel.wire.record import header_map
from tests.kafka import read_records

PER_TRANSACTION = 20
# What a read_committed reader may see twice per fault with exactly-once source. KIP-618 keeps
# Connect from re-sending anything (0 in every run measured), but Debezium, resuming after a
# restart or a lost connection, can re-emit events of the source transaction around its stored
# position (its WAL position search; docs/concepts/cdc.md): at most one transaction's events per
# resume, which the inbox's window absorbs. Without exactly-once source a kill re-sends ~1,000.
RESUME_RESENDS = PER_TRANSACTION
# What each fault test on the cluster shape streams (tests/cluster).
CLUSTER_EVENTS = 6_000


def stream_with_faults(
    stack,
    engine: Engine,
    aggregate_type: str,
    *,
    events: int,
    points: list[float],
    fault: Callable[[int], None],
    timeout: float = 600,
) -> Counter:
    """Write ``events`` outbox events (``PER_TRANSACTION`` to a transaction, 64 aggregates) in
    a thread; call ``fault(written)`` each time the count written passes one of ``points`` (a
    share of ``events``); then read the aggregate's topic from the start until every event
    arrived. Returns how many times each event id was read."""
    written = 0
    done = threading.Event()
    failure: list[BaseException] = []

    def writer() -> None:
        nonlocal written
        try:
            for start in range(0, events, PER_TRANSACTION):
                with Session(engine) as session, session.begin():
                    for n in range(start, start + PER_TRANSACTION):
                        outbox.UnitOfWork(session).publish(
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
    for point in sorted(points):
        while written < point * events and not done.is_set():
            time.sleep(0.01)
        fault(written)
    thread.join(timeout=timeout)
    assert not failure, failure
    records = read_records(  # librdkafka reads read_committed by default
        stack.bootstrap_servers(),
        [topic_for(aggregate_type, topic_prefix=stack.settings.topic_prefix)],
        until=lambda got: len({header_map(r.headers)["id"] for r in got}) >= events,
        timeout=timeout,
    )
    return Counter(header_map(r.headers)["id"] for r in records)


def seen_twice(counts: Counter) -> int:
    """How many reads were of an event read before."""
    return sum(counts.values()) - len(counts)


def check_counts(counts: Counter, events: int) -> None:
    """Every one of ``events`` read, and none twice beyond what Debezium may repeat when its
    task resumes (RESUME_RESENDS)."""
    twice = seen_twice(counts)
    print(f"{len(counts)} distinct events, {twice} seen twice")
    assert len(counts) == events, f"{events - len(counts)} events lost"
    assert twice <= RESUME_RESENDS  # what Debezium's resume may repeat, at most
