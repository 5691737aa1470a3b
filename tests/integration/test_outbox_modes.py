"""One contract for every way an event reaches the WAL: an outbox row deleted in its transaction
(``delete``), a retained row (``retain``) and a transactional logical decoding message
(``message``). Each test runs once per mode on the real stack (Postgres, Kafka, Connect +
Debezium; the kill -9 of Connect strikes the three modes' streams at once) and checks what a
consumer reads: the record is the same whatever the mode."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import uuid
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

import outbox
from cdc.config import topic_for
from outbox.publish import MODES, NewEvent
from outboxkit.kernel.wire import ID, SOURCE, SOURCE_POSITION
from outboxkit.kernel.wire.jsonb import render
from outboxkit.kernel.wire.record import KafkaRecord, decode, header_map
from outboxkit_workshop.devstack.stack import Stack
from tests.kafka import read_records
from tests.streaming import RESUME_RESENDS

TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
PAYLOAD = {
    "customer": 'Zoë ✓ 東京 "quoted" \\ back\nslash',
    "items": [{"sku": "a", "qty": 1, "gift": None}, 2, "three", None, 1.5, 1e300, -0.0],
    "nested": {"deep": {"deeper": [[], {}, [None]]}, "b": 1, "aa": 2},
    "note": None,
}


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def unit(session: Session, mode: str) -> outbox.UnitOfWork:
    return outbox.UnitOfWork(session, outbox.Outbox(mode))


# Headers whose value is the record's own: the event id, and where the connector read it
# (tests/integration/test_source_position_headers.py checks those).
PER_RECORD = (ID, SOURCE, SOURCE_POSITION)


def shared_headers(record: KafkaRecord) -> tuple[tuple[str, bytes | None], ...]:
    """The record's headers but the per-record ones, each of which it must carry once."""
    names = [name for name, _ in record.headers]
    assert all(names.count(name) == 1 for name in PER_RECORD), names
    return tuple((k, v) for k, v in record.headers if k not in PER_RECORD)


def read(stack: Stack, aggregate_type: str, expected: int, timeout=120):
    """Every record on the aggregate type's topic once ``expected`` arrived (read on to the
    topic's end, to catch extras: an event sent twice or one that should not travel is on the
    topic before the last one expected)."""
    return read_records(
        stack.bootstrap_servers(),
        [topic_for(aggregate_type)],
        until=lambda got: len(got) >= expected,
        timeout=timeout,
    )


def test_the_record_is_the_same_in_every_mode(stack, engine, aggregate_type):
    """Key, value bytes (Postgres's jsonb text), header names and values: identical across the
    modes, nulls and unicode included; only the event id and the source position differ."""
    sent = {}
    for mode in MODES:
        with Session(engine) as session, session.begin():
            sent[mode] = unit(session, mode).publish(
                aggregate_type=aggregate_type,
                aggregate_id="same-🙂",
                event_type="OrderPlaced",
                payload=PAYLOAD,
                headers={"traceparent": TP, "tenant": "acmé", "empty": ""},
            )
        with Session(engine) as session, session.begin():  # no traceparent, no other headers
            unit(session, mode).publish(
                aggregate_type=aggregate_type,
                aggregate_id="bare",
                event_type="Bare",
                payload=None,
            )
    records = read(stack, aggregate_type, 2 * len(MODES))
    assert len(records) == 2 * len(MODES)
    by_id = {header_map(r.headers)["id"]: r for r in records}
    shapes = set()
    for envelope in sent.values():
        record = by_id[str(envelope.event_id)]
        assert record.key == "same-🙂".encode()
        assert record.value == render(PAYLOAD).encode()  # exactly Postgres's jsonb text
        assert decode(record).headers == {"traceparent": TP, "tenant": "acmé", "empty": ""}
        shapes.add((record.key, record.value, shared_headers(record)))
    assert len(shapes) == 1, shapes
    bare = [r for r in records if r.key == b"bare"]
    assert {r.value for r in bare} == {b"null"}
    assert len({shared_headers(r) for r in bare}) == 1


def test_an_event_arrives_exactly_once_with_a_500_kb_payload(stack, engine, aggregate_type, mode):
    payload = {"blob": "x" * 500_000, "n": None}
    with Session(engine) as session, session.begin():
        sent = unit(session, mode).publish(
            aggregate_type=aggregate_type, aggregate_id="big", event_type="Big", payload=payload
        )
    records = read(stack, aggregate_type, 1)
    assert len(records) == 1
    assert json.loads(records[0].value) == payload
    assert decode(records[0]).event_id == sent.event_id


def test_rollback_sends_nothing_and_publishes_in_one_transaction_keep_their_order(
    stack, engine, aggregate_type, mode
):
    with Session(engine) as session, session.begin():
        unit(session, mode).publish(
            aggregate_type=aggregate_type, aggregate_id="k", event_type="X", payload={"n": -1}
        )
        session.rollback()
    with Session(engine) as session, session.begin():
        uow = unit(session, mode)
        for n in range(2):
            uow.publish(
                aggregate_type=aggregate_type, aggregate_id="k", event_type="X", payload={"n": n}
            )
        uow.publish_many([NewEvent(aggregate_type, "k", "X", {"n": n}) for n in range(2, 7)])
    records = read(stack, aggregate_type, 7)
    assert [json.loads(r.value)["n"] for r in records] == list(range(7))


def test_an_event_published_in_a_rolled_back_savepoint_is_not_sent(
    stack, engine, aggregate_type, mode
):
    """The inbox redoes a failed event inside a savepoint: what the savepoint published before
    it rolled back must not travel, in any mode (a message too is part of the subtransaction)."""
    with Session(engine) as session, session.begin():
        uow = unit(session, mode)
        uow.publish(aggregate_type=aggregate_type, aggregate_id="k", event_type="X", payload=0)
        savepoint = session.begin_nested()
        uow.publish(aggregate_type=aggregate_type, aggregate_id="k", event_type="X", payload=-1)
        savepoint.rollback()
        uow.publish(aggregate_type=aggregate_type, aggregate_id="k", event_type="X", payload=1)
    records = read(stack, aggregate_type, 2)
    assert [json.loads(r.value) for r in records] == [0, 1]


def test_per_aggregate_order_under_concurrent_writers(stack, engine, aggregate_type, mode):
    writers, aggregates, events = 4, 20, 600

    # Writer w owns the aggregates a with a % writers == w: each aggregate's order is one
    # writer's commit order, while the writers interleave in the WAL.
    def write(writer: int) -> None:
        mine = [a for a in range(aggregates) if a % writers == writer]
        for seq in range(events // aggregates):
            for a in mine:
                with Session(engine) as session, session.begin():
                    unit(session, mode).publish(
                        aggregate_type=aggregate_type,
                        aggregate_id=f"agg-{a}",
                        event_type="Step",
                        payload={"seq": seq},
                    )

    with ThreadPoolExecutor(writers) as pool:
        list(pool.map(write, range(writers)))
    records = read(stack, aggregate_type, events)
    assert len(records) == events
    per_aggregate: dict[bytes, list[int]] = defaultdict(list)
    partitions: dict[bytes, set[int]] = defaultdict(set)
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        per_aggregate[record.key].append(json.loads(record.value)["seq"])
        partitions[record.key].add(record.partition)
    assert len(per_aggregate) == aggregates
    assert all(seqs == list(range(events // aggregates)) for seqs in per_aggregate.values())
    assert all(len(p) == 1 for p in partitions.values())  # key = aggregate id: one partition


def stream(engine: Engine, aggregate_type: str, mode: str, events: int, progress: list[int]):
    """Write ``events`` events, 10 per transaction, 8 aggregates; ``progress[0]``: written."""
    for start in range(0, events, 10):
        with Session(engine) as session, session.begin():
            unit(session, mode).publish_many(
                [
                    NewEvent(aggregate_type, f"agg-{n % 8}", "Tick", {"n": n})
                    for n in range(start, start + 10)
                ]
            )
        progress[0] = start + 10


def arrivals(stack: Stack, aggregate_type: str, events: int) -> Counter[int]:
    records = read_records(
        stack.bootstrap_servers(),
        [topic_for(aggregate_type)],
        until=lambda got: len({json.loads(r.value)["n"] for r in got}) >= events,
        timeout=300,
    )
    return Counter(json.loads(r.value)["n"] for r in records)


def test_kill_9_of_connect_mid_stream_loses_nothing(stack, engine):
    """With exactly-once source a read_committed consumer sees every event in every mode, and
    none twice but for what Debezium may re-emit when its task resumes (printed; bounded by
    `tests.streaming.RESUME_RESENDS`, against ~1,000 re-sent without exactly-once source). The
    modes stream at once, each to its own topic, so that one kill strikes all three."""
    events = 4000
    aggregate_types = {mode: f"it_{mode}_{uuid.uuid4().hex[:8]}" for mode in MODES}
    progress = {mode: [0] for mode in MODES}
    writers = [
        threading.Thread(
            target=stream, args=(engine, aggregate_types[mode], mode, events, progress[mode])
        )
        for mode in MODES
    ]
    for writer in writers:
        writer.start()
    while min(p[0] for p in progress.values()) < events // 3:
        assert all(w.is_alive() for w in writers), "a writer stopped before the kill point"
        time.sleep(0.01)
    pid = stack.state.connect.pid
    os.kill(pid, signal.SIGKILL)
    print(f"killed connect at { ({m: p[0] for m, p in progress.items()}) } events written")
    stack.up()
    for writer in writers:
        writer.join(timeout=300)
    for mode in MODES:
        counts = arrivals(stack, aggregate_types[mode], events)
        twice = sum(counts.values()) - len(counts)
        print(f"{mode}: {len(counts)} distinct events, {twice} seen twice")
        assert sorted(counts) == list(range(events)), mode
        assert twice <= RESUME_RESENDS, mode


def test_a_connect_restart_while_a_transaction_of_several_events_is_open(
    stack, engine, aggregate_type, mode
):
    """Debezium restarts from its last committed source offset; a transaction with several
    messages (which share LSNs with the next change) must be delivered once, whole, in order,
    as must the events around it."""
    client = stack.connect_client()
    with Session(engine) as session, session.begin():
        unit(session, mode).publish_many(
            [NewEvent(aggregate_type, "k", "X", {"n": n}) for n in range(3)]
        )
    with Session(engine) as session, session.begin():
        uow = unit(session, mode)
        uow.publish_many([NewEvent(aggregate_type, "k", "X", {"n": n}) for n in range(3, 6)])
        client.restart(stack.settings.connector_name, include_tasks=True)
        uow.publish_many([NewEvent(aggregate_type, "k", "X", {"n": n}) for n in range(6, 9)])
    client.restart(stack.settings.connector_name, include_tasks=True)  # right after the commit
    with Session(engine) as session, session.begin():
        unit(session, mode).publish_many(
            [NewEvent(aggregate_type, "k", "X", {"n": n}) for n in range(9, 12)]
        )
    client.wait_running(stack.settings.connector_name)
    records = read(stack, aggregate_type, 12)
    assert [json.loads(r.value)["n"] for r in records] == list(range(12))
    # Restarted once the last transaction was delivered, its messages the last events the
    # connector processed (Debezium's dbz#2004 re-sent such messages after a restart).
    client.restart(stack.settings.connector_name, include_tasks=True)
    client.wait_running(stack.settings.connector_name)
    with Session(engine) as session, session.begin():
        unit(session, mode).publish(
            aggregate_type=aggregate_type, aggregate_id="k", event_type="X", payload={"n": 12}
        )
    records = read(stack, aggregate_type, 13)
    assert [json.loads(r.value)["n"] for r in records] == list(range(13))
