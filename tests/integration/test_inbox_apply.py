"""The inbox apply loop on the real Postgres: replays, re-sends, poison records, two instances."""

from __future__ import annotations

import json
import threading
import uuid

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, func, select
from sqlalchemy.orm import Session

from inbox.apply import Inbox
from inbox.decision import Action
from inbox.tables import parked, recent_ids, watermarks
from outbox.record import KafkaRecord

effects_md = MetaData()
effects = Table(
    "it_effects",
    effects_md,
    Column("consumer", String),
    Column("event_id", String),
    Column("key", String),
    Column("n", Integer),
)


@pytest.fixture(scope="module", autouse=True)
def effects_table(engine):
    effects_md.create_all(engine)


def record(topic, offset, key, n, event_id=None, event_type="Tick", value=None, partition=0):
    eid = event_id or str(uuid.uuid4())
    headers = [("id", eid.encode()), ("eventType", event_type.encode()), ("aggregateType", b"t")]
    body = value if value is not None else json.dumps({"n": n}).encode()
    return KafkaRecord(topic, partition, offset, key.encode(), body, headers, None)


def recorder(consumer, fail_keys=()):
    def handle(envelope, uow):
        if envelope.aggregate_id in fail_keys:
            raise RuntimeError(f"cannot handle {envelope.aggregate_id}")
        uow.session.execute(
            effects.insert().values(
                consumer=consumer,
                event_id=str(envelope.event_id),
                key=envelope.aggregate_id,
                n=envelope.payload["n"],
            )
        )

    return handle


def effect_counts(engine, consumer):
    with engine.connect() as conn:
        rows = conn.execute(
            select(effects.c.event_id, func.count())
            .where(effects.c.consumer == consumer)
            .group_by(effects.c.event_id)
        ).all()
    return {r[0]: r[1] for r in rows}


@pytest.fixture
def consumer():
    return f"c-{uuid.uuid4().hex[:8]}"


def test_batch_applies_once_replays_and_resends_are_skipped(engine, consumer):
    inbox = Inbox(engine, consumer, recorder(consumer), window=10)
    batch = [record("t1", o, f"k{o % 3}", o) for o in range(100)]
    first = inbox.apply_partition(batch)
    assert first.count(Action.APPLY) == 100 and first.watermark == 99
    again = inbox.apply_partition(batch)  # Spark retried the task / lost its checkpoint
    assert again.count(Action.SKIP_REPLAY) == 100
    # Debezium re-sends the last 5 events at new offsets with the same event ids.
    resent = [
        record("t1", 100 + i, r.key.decode(), i, event_id=dict(r.headers)["id"].decode())
        for i, r in enumerate(batch[-5:])
    ]
    third = inbox.apply_partition(resent)
    assert third.count(Action.SKIP_DUPLICATE) == 5 and third.watermark == 104
    counts = effect_counts(engine, consumer)
    assert len(counts) == 100 and set(counts.values()) == {1}
    with engine.connect() as conn:
        window_rows = conn.execute(
            select(func.count()).select_from(recent_ids).where(recent_ids.c.consumer == consumer)
        ).scalar_one()
        mark = conn.execute(
            select(watermarks.c.offset).where(watermarks.c.consumer == consumer)
        ).scalar_one()
    assert window_rows <= 10  # bounded by the window, not by the message count
    assert mark == 104


@pytest.mark.parametrize("optimistic", [True, False], ids=["batch-savepoint", "record-savepoints"])
def test_poison_is_parked_with_reason_and_holds_only_its_key(engine, consumer, optimistic):
    handler = recorder(consumer, fail_keys={"bad"})
    inbox = Inbox(engine, consumer, handler, max_attempts=3, optimistic=optimistic)
    batch = [
        record("t2", 0, "bad", 0),
        record("t2", 1, "good", 1),
        record("t2", 2, "bad", 2),
        record("t2", 3, "junk", 3, value=b"{not json"),
        record("t2", 4, "junk", 4),
        record("t2", 5, "good", 5),
    ]
    result = inbox.apply_partition(batch)
    assert result.count(Action.APPLY) == 2
    assert result.count(Action.PARK) == 2 and result.count(Action.HOLD) == 2
    assert result.watermark == 5  # the partition moved on
    with engine.connect() as conn:
        rows = conn.execute(
            select(
                parked.c.offset, parked.c.key, parked.c.error, parked.c.attempts, parked.c.payload
            )
            .where(parked.c.consumer == consumer)
            .order_by(parked.c.offset)
        ).all()
    assert [r.offset for r in rows] == [0, 2, 3, 4]
    assert "RuntimeError: cannot handle bad" in rows[0].error and rows[0].attempts == 3
    assert "held behind" in rows[1].error
    assert "not JSON" in rows[2].error and rows[2].payload == b"{not json"  # nothing lost
    # A later batch with the same key is still held, other keys flow.
    later = inbox.apply_partition([record("t2", 6, "bad", 6), record("t2", 7, "good", 7)])
    assert later.count(Action.HOLD) == 1 and later.count(Action.APPLY) == 1


def test_unknown_event_type_is_parked_when_handlers_are_by_type(engine, consumer):
    inbox = Inbox(engine, consumer, {"Tick": recorder(consumer)})
    result = inbox.apply_partition(
        [record("t3", 0, "a", 0, event_type="Tock"), record("t3", 1, "b", 1)]
    )
    assert result.count(Action.PARK) == 1 and result.count(Action.APPLY) == 1


def test_two_instances_on_one_partition_apply_each_event_once(engine, consumer):
    batch = [record("t4", o, f"k{o % 7}", o) for o in range(300)]
    chunks = [batch[i : i + 50] for i in range(0, 300, 50)]
    errors = []

    def run():
        inbox = Inbox(engine, consumer, recorder(consumer))
        try:
            for chunk in chunks:
                inbox.apply_partition(chunk)
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    counts = effect_counts(engine, consumer)
    assert len(counts) == 300 and set(counts.values()) == {1}


def test_a_duplicate_id_slipping_past_the_decision_aborts_the_transaction(engine, consumer):
    inbox = Inbox(engine, consumer, recorder(consumer))
    eid = str(uuid.uuid4())
    inbox.apply_partition([record("t5", 0, "a", 0, event_id=eid)])
    # Should a decision ever miss a recorded id, the primary key refuses the second apply.
    with (
        pytest.raises(Exception, match="inbox_recent"),
        Session(engine) as session,
        session.begin(),
    ):
        session.execute(
            recent_ids.insert().values(
                consumer=consumer, topic="t5", partition=0, event_id=eid, offset=9
            )
        )


def test_redrive_applies_parked_records_in_key_order_once_the_handler_is_fixed(engine, consumer):
    from inbox import admin

    failing = {"bad"}
    inbox = Inbox(engine, consumer, recorder(consumer, fail_keys=failing), max_attempts=1)
    batch = [
        record("t6", 0, "bad", 0),
        record("t6", 1, "good", 1),
        record("t6", 2, "bad", 2),
        record("t6", 3, "bad", 3),
    ]
    inbox.apply_partition(batch)
    still = admin.redrive(inbox, "t6", 0)  # handler still failing: nothing moves, order kept
    assert (still.applied, still.still_parked) == (0, 3)
    assert admin.list_parked(engine, consumer)[0]["attempts"] == 2
    failing.clear()  # the fix is deployed
    done = admin.redrive(inbox, "t6", 0, key="bad")
    assert (done.applied, done.still_parked) == (3, 0)
    with engine.connect() as conn:
        order = (
            conn.execute(
                select(effects.c.n).where(effects.c.consumer == consumer, effects.c.key == "bad")
            )
            .scalars()
            .all()
        )
    assert order == [0, 2, 3]
    assert admin.list_parked(engine, consumer) == []
    # A re-send of a redriven event is now skipped by the window.
    resend = record("t6", 4, "bad", 9, event_id=dict(batch[0].headers)["id"].decode())
    assert inbox.apply_partition([resend]).count(Action.SKIP_DUPLICATE) == 1
    rows = admin.status(engine, consumer)
    assert rows[0]["offset"] == 4 and rows[0]["parked"] == 0 and rows[0]["window"] == 4


def test_rewind_replays_explicitly(engine, consumer):
    from inbox import admin

    inbox = Inbox(engine, consumer, recorder(consumer))
    batch = [record("t7", o, "k", o) for o in range(10)]
    inbox.apply_partition(batch)
    assert admin.rewind(engine, consumer, "t7", 0, 4) == 9
    again = inbox.apply_partition(batch)
    assert again.count(Action.SKIP_REPLAY) == 5 and again.count(Action.APPLY) == 5
    with pytest.raises(ValueError, match="no watermark"):
        admin.rewind(engine, consumer, "nope", 0, 1)
