"""The inbox apply loop on the real Postgres: replays, re-sends, poison records, two instances."""

from __future__ import annotations

import json
import threading
import uuid

import pytest
from sqlalchemy import (
    Column,
    Integer,
    MetaData,
    String,
    Table,
    create_engine,
    func,
    select,
    text,
)
from sqlalchemy.exc import DataError
from sqlalchemy.orm import Session

from inbox import BatchHandler, Inbox, operations
from inbox.decision import Action
from inbox.recorder import Recorder
from inbox.tables import parked, recent_ids, watermarks
from migrations import runner
from outbox import Outbox
from outboxkit.kernel.wire.record import KafkaRecord

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


def counts(engine, key, *where):
    """Rows per value of the column ``key`` among the rows matching ``where``."""
    with engine.connect() as conn:
        rows = conn.execute(select(key, func.count()).where(*where).group_by(key)).all()
    return {r[0]: r[1] for r in rows}


def effect_counts(engine, consumer):
    return counts(engine, effects.c.event_id, effects.c.consumer == consumer)


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


def window_rows(engine, consumer, topic):
    """(first offset, last offset, event ids, offsets) of the partition's window, in order."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(
                recent_ids.c.first_offset,
                recent_ids.c.last_offset,
                recent_ids.c.event_ids,
                recent_ids.c.offsets,
            )
            .where(recent_ids.c.consumer == consumer, recent_ids.c.topic == topic)
            .order_by(recent_ids.c.first_offset)
        ).all()
    return [tuple(r) for r in rows]


def ids_of(records):
    return [dict(r.headers)["id"].decode() for r in records]


def test_resent_ids_are_skipped_within_a_slice_and_in_a_later_one(engine, consumer):
    inbox = Inbox(engine, consumer, recorder(consumer), window=100)
    a, b, c, d = (str(uuid.uuid4()) for _ in range(4))
    first = inbox.apply_partition(
        [
            record("t5", 0, "a", 0, event_id=a),
            record("t5", 1, "b", 1, event_id=b),
            record("t5", 2, "a", 2, event_id=a),  # re-sent within the slice
            record("t5", 3, "c", 3, event_id=c),
        ]
    )
    assert first.count(Action.APPLY) == 3 and first.count(Action.SKIP_DUPLICATE) == 1
    later = inbox.apply_partition(
        [
            record("t5", 4, "b", 4, event_id=b),  # re-sent in a later slice
            record("t5", 5, "d", 5, event_id=d),
            record("t5", 6, "c", 6, event_id=c),
        ]
    )
    assert later.count(Action.APPLY) == 1 and later.count(Action.SKIP_DUPLICATE) == 2
    assert effect_counts(engine, consumer) == dict.fromkeys([a, b, c, d], 1)
    # One row per slice: the applied ids and their offsets, in offset order.
    assert window_rows(engine, consumer, "t5") == [(0, 3, [a, b, c], [0, 1, 3]), (5, 5, [d], [5])]


def test_an_id_twice_in_one_slice_is_refused_by_the_recorder(engine, consumer):
    # The decision skips a re-send within a slice; should it ever let one through, the
    # bookkeeping aborts the transaction rather than commit a duplicate effect.
    eid = str(uuid.uuid4())
    with pytest.raises(ValueError, match="applied twice"), Session(engine) as session:
        Recorder(consumer, window=10).remember(session, "t5", 0, [(eid, 1), (eid, 2)])


def test_an_id_that_is_not_a_uuid_is_refused_by_the_recorder(engine, consumer):
    # The window's ids travel as one comma-separated text: an id with a comma (two UUIDs
    # joined, say) must not become two remembered ids, nor anything else that is not a UUID.
    joined = f"{uuid.uuid4()},{uuid.uuid4()}"
    with pytest.raises(ValueError, match="not a UUID"), Session(engine) as session:
        Recorder(consumer, window=10).remember(session, "t5", 0, [(joined, 1)])
    with pytest.raises(DataError, match="uuid"), Session(engine) as session:
        Recorder(consumer, window=10).remember(session, "t5", 0, [("not-a-uuid", 1)])
    assert window_rows(engine, consumer, "t5") == []


def test_ids_below_the_window_are_forgotten_and_its_rows_stay_bounded(engine, consumer):
    inbox = Inbox(engine, consumer, recorder(consumer), window=10)
    batch = [record("t8", o, f"k{o % 3}", o) for o in range(60)]
    ids = ids_of(batch)
    for start in range(0, 60, 3):  # 20 slices of 3 offsets
        inbox.apply_partition(batch[start : start + 3])
        assert len(window_rows(engine, consumer, "t8")) <= 4  # 10 offsets: 4 slices at most
    # Watermark 59, floor 50: the slice 48-50 straddles the floor and stays whole.
    assert [r[0] for r in window_rows(engine, consumer, "t8")] == [48, 51, 54, 57]
    assert operations.status(engine, consumer)[0]["window"] == 12
    resent = inbox.apply_partition(
        [
            record("t8", 60, "k0", 0, event_id=ids[40]),  # below the window: forgotten
            record("t8", 61, "k0", 0, event_id=ids[48]),  # in the straddling slice
            record("t8", 62, "k0", 0, event_id=ids[55]),
        ]
    )
    assert resent.count(Action.APPLY) == 1 and resent.count(Action.SKIP_DUPLICATE) == 2
    assert effect_counts(engine, consumer)[ids[40]] == 2  # the window's limit, as documented


def test_rewind_into_a_slice_forgets_exactly_the_ids_above_it(engine, consumer):
    inbox = Inbox(engine, consumer, recorder(consumer), window=100)
    batch = [record("t9", o, f"k{o % 2}", o) for o in range(15)]
    ids = ids_of(batch)
    for start in (0, 5, 10):
        inbox.apply_partition(batch[start : start + 5])
    assert operations.rewind(engine, consumer, "t9", 0, 6) == 14
    assert window_rows(engine, consumer, "t9") == [
        (0, 4, ids[0:5], [0, 1, 2, 3, 4]),
        (5, 6, ids[5:7], [5, 6]),  # trimmed; the slice 10-14 is gone
    ]
    assert operations.status(engine, consumer)[0]["window"] == 7
    # The replay applies the events above the offset once more, and only those.
    again = inbox.apply_partition(batch)
    assert again.count(Action.SKIP_REPLAY) == 7 and again.count(Action.APPLY) == 8
    assert inbox.apply_partition(batch).count(Action.SKIP_REPLAY) == 15
    assert effect_counts(engine, consumer) == {
        **dict.fromkeys(ids[:7], 1),
        **dict.fromkeys(ids[7:], 2),
    }
    # The replayed ids are remembered again: a later re-send is skipped.
    resend = record("t9", 15, "k1", 9, event_id=ids[9])
    assert inbox.apply_partition([resend]).count(Action.SKIP_DUPLICATE) == 1


def test_redrive_applies_parked_records_in_key_order_once_the_handler_is_fixed(engine, consumer):
    failing = {"bad"}
    inbox = Inbox(engine, consumer, recorder(consumer, fail_keys=failing), max_attempts=1)
    batch = [
        record("t6", 0, "bad", 0),
        record("t6", 1, "good", 1),
        record("t6", 2, "bad", 2),
        record("t6", 3, "bad", 3),
    ]
    inbox.apply_partition(batch)
    assert parked_flag(engine, consumer, "t6") is True  # the next slices look their keys up
    still = operations.redrive(inbox, "t6", 0)  # handler still failing: nothing moves, order kept
    assert (still.applied, still.still_parked) == (0, 3)
    assert parked_flag(engine, consumer, "t6") is True
    assert operations.list_parked(engine, consumer)[0]["attempts"] == 2
    failing.clear()  # the fix is deployed
    done = operations.redrive(inbox, "t6", 0, key="bad")
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
    assert operations.list_parked(engine, consumer) == []
    assert parked_flag(engine, consumer, "t6") is False  # nothing parked: no key lookup
    # A re-send of a redriven event is now skipped by the window.
    resend = record("t6", 4, "bad", 9, event_id=dict(batch[0].headers)["id"].decode())
    assert inbox.apply_partition([resend]).count(Action.SKIP_DUPLICATE) == 1
    rows = operations.status(engine, consumer)
    assert rows[0]["offset"] == 4 and rows[0]["parked"] == 0 and rows[0]["window"] == 4


def parked_flag(engine, consumer: str, topic: str, partition: int = 0) -> bool:
    """Whether the partition's watermark row says it may have parked records."""
    with Session(engine) as session, session.begin():
        return Recorder(consumer).locked(session, topic, partition).any_parked


def test_any_insert_of_a_parked_record_marks_its_partition_and_a_new_watermark_row_reads_it(
    engine, consumer
):
    """The flag holds whoever parks: a consumer of an older version, an operator's SQL."""
    inbox = Inbox(engine, consumer, recorder(consumer))
    inbox.apply_partition([record("t8", 0, "a", 0)])
    assert parked_flag(engine, consumer, "t8") is False
    raw_park = text(
        'INSERT INTO inbox_parked (consumer, topic, "partition", "offset", raw_key, error,'
        " attempts) VALUES (:consumer, :topic, :partition, :offset, 'b', 'parked by hand', 1)"
    )
    with engine.begin() as conn:  # without the Recorder: the trigger marks the partition
        conn.execute(raw_park, {"consumer": consumer, "topic": "t8", "partition": 0, "offset": 1})
    assert parked_flag(engine, consumer, "t8") is True
    held = inbox.apply_partition([record("t8", 2, "b", 2), record("t8", 3, "a", 3)])
    assert (held.count(Action.HOLD), held.count(Action.APPLY)) == (1, 1)
    # A partition whose watermark row is created after its records were parked reads them.
    with engine.begin() as conn:
        conn.execute(raw_park, {"consumer": consumer, "topic": "t9", "partition": 0, "offset": 5})
    assert parked_flag(engine, consumer, "t9") is True
    later = inbox.apply_partition([record("t9", 6, "b", 6)])
    assert later.count(Action.HOLD) == 1


def test_rewind_replays_explicitly(engine, consumer):
    inbox = Inbox(engine, consumer, recorder(consumer))
    batch = [record("t7", o, "k", o) for o in range(10)]
    inbox.apply_partition(batch)
    assert operations.rewind(engine, consumer, "t7", 0, 4) == 9
    again = inbox.apply_partition(batch)
    assert again.count(Action.SKIP_REPLAY) == 5 and again.count(Action.APPLY) == 5
    with pytest.raises(ValueError, match="no watermark"):
        operations.rewind(engine, consumer, "nope", 0, 1)


def reloptions(conn, toast=False):
    relation = "t.reloptions FROM pg_class c JOIN pg_class t ON t.oid = c.reltoastrelid"
    query = f"SELECT {relation if toast else 'c.reloptions FROM pg_class c'}"
    return set(conn.execute(text(f"{query} WHERE c.relname = 'inbox_recent'")).scalar_one() or ())


def test_migration_carries_the_per_id_window_over_to_slices_and_back(empty_database):
    e1, e2, e3, e4, e5 = sorted(str(uuid.uuid4()) for _ in range(5))
    per_id = [
        ("c1", "t", 0, e2, 12),
        ("c1", "t", 0, e1, 10),
        ("c1", "t", 0, e3, 15),
        ("c1", "t", 1, e4, 3),
        ("c2", "t", 0, e5, 7),
    ]
    runner.upgrade(empty_database, "0004_inbox_vacuum")
    engine = create_engine(empty_database)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    'INSERT INTO inbox_recent (consumer, topic, "partition", event_id, "offset")'
                    " VALUES (:c, :t, :p, :e, :o)"
                ),
                [dict(zip("ctpeo", row, strict=True)) for row in [*per_id, ("c1", "t", 0, "x", 1)]],
            )
        runner.upgrade(empty_database)
        with engine.connect() as conn:
            slices = conn.execute(select(recent_ids).order_by(*recent_ids.primary_key)).all()
            assert "autovacuum_vacuum_threshold=200" in reloptions(conn)
            assert "autovacuum_vacuum_threshold=500" in reloptions(conn, toast=True)
        assert [tuple(r) for r in slices] == [  # ordered by offset; "x" is no UUID: dropped
            ("c1", "t", 0, 10, 15, [e1, e2, e3], [10, 12, 15]),
            ("c1", "t", 1, 3, 3, [e4], [3]),
            ("c2", "t", 0, 7, 7, [e5], [7]),
        ]
        with Session(engine) as session:
            found = Recorder("c1", window=100).recent(session, "t", 0, [e1, e3, e4, "x"])
        assert found == {e1, e3}
        runner.downgrade(empty_database, "0004_inbox_vacuum")
        with engine.connect() as conn:
            back = conn.execute(
                text('SELECT consumer, topic, "partition", event_id, "offset" FROM inbox_recent')
            ).all()
            assert reloptions(conn) == {
                "autovacuum_vacuum_scale_factor=0.0",
                "autovacuum_vacuum_threshold=10000",
                "autovacuum_vacuum_cost_delay=0",
            }
        assert sorted(tuple(r) for r in back) == sorted(per_id)
    finally:
        engine.dispose()


def batch_recorder(consumer, calls, fail_keys=(), seen=None):
    """A batch handler inserting the slice's effects in one executemany; records each call's
    event count (and, in ``seen``, the order the events came in)."""

    def apply(events, uow):
        calls.append(len(events))
        if seen is not None:
            seen.extend(e.payload["n"] for e in events)
        if any(e.aggregate_id in fail_keys for e in events):
            raise RuntimeError("cannot handle the slice")
        uow.session.execute(
            effects.insert(),
            [
                {
                    "consumer": consumer,
                    "event_id": str(e.event_id),
                    "key": e.aggregate_id,
                    "n": e.payload["n"],
                }
                for e in events
            ],
        )

    return BatchHandler(apply, frozenset({"Tick"}))


def test_a_batch_handler_gets_the_slice_once_in_offset_order(engine, consumer):
    calls: list[int] = []
    seen: list[int] = []
    inbox = Inbox(engine, consumer, batch_recorder(consumer, calls, seen=seen))
    slice_ = [record("b1", offset, f"k{offset % 3}", offset) for offset in (4, 0, 2, 1, 3)]
    result = inbox.apply_partition(slice_)
    assert calls == [5] and result.count(Action.APPLY) == 5  # one call for the whole slice
    assert seen == [0, 1, 2, 3, 4]  # handed over in offset order
    assert sorted(effect_counts(engine, consumer).values()) == [1] * 5
    # Replayed with one new record: only that one reaches the handler.
    inbox.apply_partition([*slice_, record("b1", 5, "k2", 5)])
    assert calls == [5, 1]


def test_a_failing_batch_falls_back_to_single_events_and_parks_only_the_failing_key(
    engine, consumer
):
    calls: list[int] = []
    inbox = Inbox(engine, consumer, batch_recorder(consumer, calls, {"bad"}), max_attempts=2)
    slice_ = [
        record("b2", 0, "good", 0),
        record("b2", 1, "bad", 1),
        record("b2", 2, "other", 2),
        record("b2", 3, "bad", 3),
        record("b2", 4, "good", 4),
        record("b2", 5, "x", 5, event_type="Unknown"),
    ]
    result = inbox.apply_partition(slice_)
    # The slice once (rolled back), then one call per applicable event, the bad one twice.
    assert calls == [5, 1, 1, 1, 1, 1]
    assert result.count(Action.APPLY) == 3
    assert result.count(Action.PARK) == 2 and result.count(Action.HOLD) == 1
    assert sorted(effect_counts(engine, consumer).values()) == [1, 1, 1]
    with engine.connect() as conn:
        parked_rows = conn.execute(
            select(parked.c.offset, parked.c.error)
            .where(parked.c.consumer == consumer)
            .order_by(parked.c.offset)
        ).all()
    assert [r.offset for r in parked_rows] == [1, 3, 5]
    assert "cannot handle the slice" in parked_rows[0].error
    assert "held behind" in parked_rows[1].error and "unknown event type" in parked_rows[2].error


def test_events_a_batch_handler_publishes_commit_with_the_slice(engine, consumer):
    from outbox import NewEvent
    from outbox.table import outbox_table

    def relay(events, uow):
        uow.publish_many(
            [
                NewEvent("relayed", e.aggregate_id, "Relayed", {"n": e.payload["n"]}, caused_by=e)
                for e in events
            ]
        )

    inbox = Inbox(engine, consumer, BatchHandler(relay), outbox=Outbox(mode="retain"))
    traced = record("b3", 0, "k", 0)
    traced.headers.append(("traceparent", b"00-" + b"a" * 32 + b"-" + b"b" * 16 + b"-01"))
    result = inbox.apply_partition([traced, record("b3", 1, "k", 1)])
    assert len(result.published) == 2
    ids = [e.event_id for e in result.published]
    with engine.connect() as conn:
        rows = conn.execute(
            select(outbox_table.c.id, outbox_table.c.traceparent).where(outbox_table.c.id.in_(ids))
        ).all()
    assert len(rows) == 2
    by_id = {r.id: r.traceparent for r in rows}
    assert by_id[ids[0]].startswith("00-" + "a" * 32)  # continues the consumed event's trace
    assert not by_id[ids[1]].startswith("00-" + "a" * 32)  # an untraced event: a new trace


def test_a_failing_slice_keeps_nothing_it_published_and_the_redo_publishes_once(engine, consumer):
    """The slice at once publishes an event per record and fails on one: its transaction is
    rolled back, events and all, and the slice redone record by record publishes one event per
    applied record (retain mode: the outbox rows stay visible to count)."""
    from outbox import NewEvent
    from outbox.table import outbox_table

    aggregate = f"relayed-{uuid.uuid4().hex[:8]}"

    def relay(events, uow):
        uow.publish_many(
            [NewEvent(aggregate, e.aggregate_id, "Relayed", {"n": e.payload["n"]}) for e in events]
        )
        if any(e.aggregate_id == "bad" for e in events):
            raise RuntimeError("cannot relay bad")

    inbox = Inbox(
        engine, consumer, BatchHandler(relay), outbox=Outbox(mode="retain"), max_attempts=1
    )
    slice_ = [record("b4", n, key, n) for n, key in enumerate(["a", "bad", "b", "c"])]
    result = inbox.apply_partition(slice_)
    assert result.count(Action.APPLY) == 3 and result.count(Action.PARK) == 1
    relayed = outbox_table.c.aggregatetype == aggregate
    assert counts(engine, outbox_table.c.aggregateid, relayed) == {"a": 1, "b": 1, "c": 1}
    assert sorted(e.aggregate_id for e in result.published) == ["a", "b", "c"]
