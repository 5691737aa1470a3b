"""Scheduled messages on the real stack: written in the caller's transaction, released into the
outbox once due on the database's clock, carried by Debezium to Kafka exactly once, in every
outbox mode; cancelled or replaced by key in a transaction; two releasers never release one
message twice."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

import outbox
from outbox import scheduled
from outbox.publish import MODES
from outboxkit.kernel.errors import InvalidEvent
from outboxkit.kernel.wire.record import decode
from tests.integration.test_outbox_modes import read

LATER = timedelta(hours=2)


@pytest.fixture(autouse=True)
def nothing_scheduled(engine: Engine):
    """Each test starts and ends with no pending scheduled message (they share the database)."""
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM outbox_scheduled"))
    yield
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM outbox_scheduled"))


def in_the_future(engine: Engine, by: timedelta = LATER) -> datetime:
    with engine.connect() as conn:
        return conn.execute(text("SELECT now()")).scalar_one() + by


@pytest.mark.parametrize("mode", MODES)
def test_a_due_message_reaches_kafka_once_with_its_id(stack, engine, aggregate_type, mode):
    writer = outbox.Outbox(mode).release_writer()
    with Session(engine) as session, session.begin():
        uow = outbox.UnitOfWork(session, outbox.Outbox(mode))
        soon = uow.schedule(
            aggregate_type=aggregate_type,
            aggregate_id="o-1",
            event_type="PaymentTimedOut",
            payload={"order_id": "o-1"},
            delay=0,
        )
        uow.schedule(
            aggregate_type=aggregate_type,
            aggregate_id="o-1",
            event_type="Later",
            payload={},
            delay=LATER,
        )
        assert uow.published == []  # not published until released
    done = scheduled.release_due(engine, writer)
    assert done.count == 1 and done.lags[0] >= 0
    assert scheduled.release_due(engine, writer).count == 0  # the later one waits
    records = read(stack, aggregate_type, 1)
    assert [decode(r).event_id for r in records] == [soon.event_id]
    assert decode(records[0]).payload == {"order_id": "o-1"}
    assert scheduled.pending(engine)["pending"] == 1


def test_time_decides_in_order_and_a_harness_can_move_it(engine):
    released: list[list[str]] = []

    def keep(session: Session, rows) -> None:
        released.append([r.type for r in rows])

    with Session(engine) as session, session.begin():
        uow = outbox.UnitOfWork(session)
        now = session.execute(text("SELECT now()")).scalar_one()
        for n, minutes in enumerate([30, 10, 20, 10]):
            uow.schedule(
                aggregate_type="order",
                aggregate_id="o-1",
                event_type=f"E{n}",
                payload={},
                at=now + timedelta(minutes=minutes),
            )
    assert scheduled.release_due(engine, keep).count == 0
    done = scheduled.release_due(engine, keep, now=now + timedelta(minutes=25))
    assert released[-1] == ["E1", "E3", "E2"]  # by time, then the order scheduled
    assert done.next_due == pytest.approx(5 * 60, abs=1)
    assert scheduled.release_due(engine, keep, now=now + timedelta(hours=1)).count == 1


def test_cancel_and_replace_by_key_in_the_callers_transaction(engine):
    def publish(key: str, event_type: str, *, cancel: bool = False, rollback: bool = False):
        with Session(engine) as session, session.begin():
            uow = outbox.UnitOfWork(session)
            if cancel:
                return uow.cancel_scheduled(key)
            uow.schedule(
                aggregate_type="order",
                aggregate_id="o-2",
                event_type=event_type,
                payload={},
                delay=LATER,
                key=key,
            )
            if rollback:
                session.rollback()
        return None

    publish("timeout:o-2", "First")
    publish("timeout:o-2", "Second")  # replaces it
    publish("timeout:o-3", "Rolled", rollback=True)
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT key, type FROM outbox_scheduled")).all()
    assert [tuple(r) for r in rows] == [("timeout:o-2", "Second")]
    assert publish("timeout:o-2", "", cancel=True) == 1
    assert publish("timeout:o-2", "", cancel=True) == 0
    assert scheduled.pending(engine)["pending"] == 0


def test_bad_schedules_are_refused_before_anything_is_written(engine):
    with Session(engine) as session, session.begin():
        uow = outbox.UnitOfWork(session)
        base = {"aggregate_type": "order", "aggregate_id": "o", "event_type": "T", "payload": {}}
        for wrong in (
            {},
            {"delay": 1, "at": datetime.now(UTC)},
            {"at": datetime(2030, 1, 1)},  # naive
            {"delay": -1},
            {"delay": float("nan")},
            {"delay": 1, "key": ""},
        ):
            with pytest.raises(InvalidEvent):
                uow.schedule(**base, **wrong)
        with pytest.raises(InvalidEvent, match="share a key"):
            uow.schedule_many(
                [outbox.NewEvent("order", "o", "T", {})] * 2,
                [scheduled.due_of(None, 1, "k")] * 2,
            )
    assert scheduled.pending(engine)["pending"] == 0


def test_two_releasers_at_once_release_each_message_once(engine):
    """Two releasers racing over 3,000 due messages (100 per transaction): every message is
    written to the outbox once, none twice, none lost, and each releaser's batches come out in
    due order (one releaser at a time holds the lock)."""
    run = uuid.uuid4().hex[:8]
    with Session(engine) as session, session.begin():
        uow = outbox.UnitOfWork(session)
        now = session.execute(text("SELECT now()")).scalar_one()
        events = [outbox.NewEvent("order", f"{run}-{n % 7}", "Due", {"n": n}) for n in range(3000)]
        dues = [scheduled.due_of(now - timedelta(seconds=3000 - n), None) for n in range(3000)]
        uow.schedule_many(events, dues)
    written: Counter[uuid.UUID] = Counter()
    order: list[int] = []
    lock = threading.Lock()

    def keep(session: Session, rows) -> None:
        with lock:
            written.update(r.id for r in rows)
            order.extend(int(r.payload.split(":")[1].rstrip("}")) for r in rows)

    def release() -> None:
        while scheduled.pending(engine)["pending"]:
            scheduled.release_due(engine, keep, limit=100)

    threads = [threading.Thread(target=release) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(written) == 3000 and set(written.values()) == {1}
    assert order == sorted(order)  # released in due order across both releasers


def test_a_releaser_thread_releases_what_comes_due(engine):
    seen: list[scheduled.Released] = []
    releaser = scheduled.Releaser(
        engine, outbox.Outbox("retain").release_writer(), poll=0.05, on_release=seen.append
    )
    run = uuid.uuid4().hex
    with Session(engine) as session, session.begin():
        outbox.UnitOfWork(session).schedule(
            aggregate_type="order", aggregate_id=run, event_type="Soon", payload={}, delay=0.5
        )
    releaser.start()
    try:
        from outboxkit.kernel.retry import wait_until

        wait_until(lambda: sum(s.count for s in seen) == 1, timeout=10, what="the release")
    finally:
        releaser.stop()
    assert 0.0 <= seen[0].lags[0] < 2.0
    with engine.connect() as conn:
        assert (
            conn.execute(
                text("SELECT count(*) FROM outbox WHERE aggregateid = :a"), {"a": run}
            ).scalar_one()
            == 1
        )
