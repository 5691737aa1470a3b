"""Concurrent writers: every event arrives once and each aggregate keeps its commit order."""

from __future__ import annotations

import json
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy.orm import Session

import outbox
from cdc.config import topic_for
from tests.kafka import read_records

WRITERS, AGGREGATES, EVENTS = 4, 50, 2000


def test_per_aggregate_order_is_preserved_across_concurrent_writers(stack, engine, aggregate_type):
    # Writer w owns aggregates a with a % WRITERS == w, so each aggregate's sequence is defined
    # by one writer's commit order, while the four writers interleave in the WAL.
    def write(writer: int) -> None:
        mine = [a for a in range(AGGREGATES) if a % WRITERS == writer]
        for seq in range(EVENTS // AGGREGATES):
            for a in mine:
                with Session(engine) as session, session.begin():
                    outbox.UnitOfWork(session).publish(
                        aggregate_type=aggregate_type,
                        aggregate_id=f"agg-{a}",
                        event_type="Step",
                        payload={"seq": seq, "writer": writer},
                    )

    with ThreadPoolExecutor(WRITERS) as pool:
        list(pool.map(write, range(WRITERS)))
    records = read_records(
        stack.bootstrap_servers(),
        [topic_for(aggregate_type)],
        until=lambda got: len(got) >= EVENTS,
        timeout=180,
        idle_after_done=3.0,
    )
    assert len(records) == EVENTS
    per_aggregate: dict[bytes, list[int]] = defaultdict(list)
    partition_of: dict[bytes, set[int]] = defaultdict(set)
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        per_aggregate[record.key].append(json.loads(record.value)["seq"])
        partition_of[record.key].add(record.partition)
    assert len(per_aggregate) == AGGREGATES
    for key, seqs in per_aggregate.items():
        assert seqs == list(range(EVENTS // AGGREGATES)), key
        assert len(partition_of[key]) == 1, key  # key = aggregate id pins one partition
