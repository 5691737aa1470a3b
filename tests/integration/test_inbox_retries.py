"""Delayed retries on the real Postgres: a record whose handler fails for a passing reason waits
parked, holding its key while the partition's other keys move on, and the retrier applies it
once after its back-off, the key's later records behind it in order; a spent policy parks it
for a person with its history; the state is all in Postgres; two retriers never apply twice.
Time is moved with ``retry_due(now=...)`` instead of waited for."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, create_engine, func, select, text
from sqlalchemy.engine import Engine

from inbox import Inbox, RetryLater, RetryPolicy, operations, retry_due
from inbox.decision import Action
from inbox.tables import parked, watermarks
from outboxkit import cli
from outboxkit.kernel.wire.record import KafkaRecord
from spark_consumers.job import Job

TOPIC = "retries"

effects_md = MetaData()
retry_effects = Table(
    "it_retry_effects",
    effects_md,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("consumer", String, nullable=False),
    Column("key", String, nullable=False),
    Column("event_id", String, nullable=False),
    Column("n", Integer, nullable=False),
)
# A row another transaction holds locked, for a handler's NOWAIT to meet (55P03).
retry_locks = Table("it_retry_locks", effects_md, Column("id", Integer, primary_key=True))

POLICY = RetryPolicy(attempts=3, first=10.0, factor=2.0, cap=60.0)


@pytest.fixture(scope="module", autouse=True)
def tables(engine: Engine) -> None:
    effects_md.create_all(engine)


@pytest.fixture
def consumer() -> str:
    return f"retry-{uuid.uuid4().hex[:8]}"


def record(offset: int, key: str, n: int | None = None, topic: str = TOPIC) -> KafkaRecord:
    headers = [("id", str(uuid.uuid4()).encode()), ("eventType", b"Tick"), ("aggregateType", b"t")]
    value = json.dumps({"n": offset if n is None else n}).encode()
    return KafkaRecord(topic, 0, offset, key.encode(), value, headers, None)


def handler(consumer: str, fail: Callable[[str, int, int], BaseException | None]) -> Any:
    """Writes an effect per event, unless ``fail(key, n, run)`` (n: the payload's, run: this
    event's handler runs so far, from 1) gives an exception to raise; ``handler.runs`` counts
    the runs per event id."""
    runs: Counter[str] = Counter()

    def handle(envelope: Any, uow: Any) -> None:
        runs[str(envelope.event_id)] += 1
        n = envelope.payload["n"]
        failure = fail(envelope.aggregate_id, n, runs[str(envelope.event_id)])
        if failure is not None:
            raise failure
        uow.session.execute(
            retry_effects.insert().values(
                consumer=consumer,
                key=envelope.aggregate_id,
                event_id=str(envelope.event_id),
                n=envelope.payload["n"],
            )
        )

    handle.runs = runs  # type: ignore[attr-defined]
    return handle


def effects(engine: Engine, consumer: str) -> list[tuple[str, int]]:
    """(key, n) of every effect, in the order they were written."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(retry_effects.c.key, retry_effects.c.n)
            .where(retry_effects.c.consumer == consumer)
            .order_by(retry_effects.c.id)
        )
        return [(k, n) for k, n in rows]


def parked_rows(engine: Engine, consumer: str) -> list[Any]:
    with engine.connect() as conn:
        return list(
            conn.execute(
                select(parked).where(parked.c.consumer == consumer).order_by(parked.c.offset)
            )
        )


def db_now(engine: Engine) -> datetime:
    with engine.connect() as conn:
        return conn.execute(select(func.now())).scalar_one()


def any_parked(engine: Engine, consumer: str) -> bool:
    with engine.connect() as conn:
        return conn.execute(
            select(watermarks.c.any_parked).where(watermarks.c.consumer == consumer)
        ).scalar_one()


@pytest.mark.parametrize("optimistic", [True, False], ids=["batch", "record-by-record"])
def test_a_passing_failure_is_applied_once_after_its_back_off_its_key_held_others_moving_on(
    engine: Engine, consumer: str, optimistic: bool
) -> None:
    # The slice at once runs the handler a first time (rolled back, then record by record).
    fails = 2 + optimistic

    def fail(key: str, n: int, run: int) -> BaseException | None:
        return TimeoutError("slow") if n == 0 and run <= fails else None

    handle = handler(consumer, fail)
    inbox = Inbox(engine, consumer, handle, retry=POLICY, optimistic=optimistic)
    batch = [record(0, "a"), record(1, "b"), record(2, "a"), record(3, "c"), record(4, "a")]
    first = inbox.apply_partition(batch)
    assert (first.count(Action.APPLY), first.count(Action.PARK), first.count(Action.HOLD)) == (
        2,
        1,
        2,
    )
    assert effects(engine, consumer) == [("b", 1), ("c", 3)]  # the other keys moved on
    head, *held = parked_rows(engine, consumer)
    assert head.attempts == 1  # a passing failure is not run again at once
    assert "TimeoutError: slow" in head.error and len(head.history) == 1
    waited = head.retry_at - datetime.fromisoformat(head.history[0]["at"])
    assert waited == timedelta(seconds=10)
    assert [(r.offset, r.retry_at, r.history) for r in held] == [(2, None, []), (4, None, [])]

    assert retry_due(inbox, now=head.retry_at - timedelta(seconds=1)).applied == 0  # not yet
    again = retry_due(inbox, now=head.retry_at)  # fails once more: the next delay is 20 s
    assert (again.applied, again.still_parked, again.retrying) == (0, 3, 1)
    head = parked_rows(engine, consumer)[0]
    assert len(head.history) == 2 and head.attempts == 2
    assert head.retry_at - datetime.fromisoformat(head.history[1]["at"]) == timedelta(seconds=20)

    # Meanwhile the key's next record is held, the others applied.
    batch += [record(5, "a"), record(6, "b")]
    later = inbox.apply_partition(batch[5:])
    assert (later.count(Action.HOLD), later.count(Action.APPLY)) == (1, 1)

    done = retry_due(inbox, now=head.retry_at)
    assert (done.applied, done.still_parked) == (4, 0)
    assert effects(engine, consumer) == [
        ("b", 1),
        ("c", 3),
        ("b", 6),
        ("a", 0),
        ("a", 2),
        ("a", 4),
        ("a", 5),
    ]
    assert parked_rows(engine, consumer) == [] and not any_parked(engine, consumer)
    assert retry_due(inbox, now=head.retry_at + timedelta(hours=1)).applied == 0
    # A replay of everything applies nothing again.
    replay = inbox.apply_partition(batch)
    assert replay.count(Action.SKIP_REPLAY) == 7 and len(effects(engine, consumer)) == 7
    assert max(handle.runs.values()) == fails + 1  # the head: failed, retried, applied


def test_a_spent_policy_parks_the_record_for_a_person_with_its_history(
    engine: Engine, consumer: str
) -> None:
    busy = handler(consumer, lambda key, n, run: RetryLater("the warehouse is closed"))
    policy = RetryPolicy(attempts=2, first=5.0, factor=3.0, cap=60.0)
    inbox = Inbox(engine, consumer, busy, retry=policy)
    inbox.apply_partition([record(0, "a"), record(1, "a")])
    for delay in (5, 15):
        head = parked_rows(engine, consumer)[0]
        assert head.retry_at - datetime.fromisoformat(head.history[-1]["at"]) == timedelta(
            seconds=delay
        )
        retry_due(inbox, now=head.retry_at)
    head, held = parked_rows(engine, consumer)
    assert head.retry_at is None and held.retry_at is None  # for a person now
    assert head.error.startswith("retries exhausted after 2 delayed retries: ")
    assert "RetryLater: the warehouse is closed" in head.error
    assert [e["retry_at"] is not None for e in head.history] == [True, True, False]
    assert all("the warehouse is closed" in e["error"] for e in head.history)
    assert retry_due(inbox, now=db_now(engine) + timedelta(days=1)).applied == 0
    # A person redrives it once the warehouse is open again: applied, in order.
    fixed = Inbox(engine, consumer, handler(consumer, lambda key, n, run: None), retry=policy)
    assert operations.redrive(fixed, TOPIC, 0).applied == 2
    assert effects(engine, consumer) == [("a", 0), ("a", 1)]


def test_the_delay_a_handler_asks_for_is_kept_and_other_failures_are_for_a_person(
    engine: Engine, consumer: str
) -> None:
    def fail(key: str, n: int, run: int) -> BaseException | None:
        return RetryLater("later", after=120) if key == "a" else ValueError("bad amount")

    inbox = Inbox(engine, consumer, handler(consumer, fail), retry=POLICY, max_attempts=2)
    inbox.apply_partition([record(0, "a"), record(1, "b")])
    a, b = parked_rows(engine, consumer)
    assert a.retry_at - datetime.fromisoformat(a.history[0]["at"]) == timedelta(seconds=120)
    assert (b.retry_at, b.attempts) == (None, 2)  # today's path: attempts at once, then parked
    assert "ValueError: bad amount" in b.history[0]["error"]


def test_with_retries_off_a_passing_failure_takes_todays_path(
    engine: Engine, consumer: str
) -> None:
    def fail(key: str, n: int, run: int) -> BaseException | None:
        return RetryLater("later") if key == "a" else TimeoutError("slow")

    inbox = Inbox(engine, consumer, handler(consumer, fail), retry=RetryPolicy(attempts=0))
    inbox.apply_partition([record(0, "a")])
    (a,) = parked_rows(engine, consumer)
    assert (a.retry_at, a.attempts) == (None, 3)
    with pytest.raises(TimeoutError):  # taken for an unreachable database: the batch is retried
        inbox.apply_partition([record(1, "b")])


@pytest.mark.parametrize("optimistic", [True, False], ids=["batch", "record-by-record"])
def test_a_lock_the_handler_cannot_take_is_retried_later_on_the_same_connection(
    engine: Engine, consumer: str, optimistic: bool
) -> None:
    row = uuid.uuid4().int % 1_000_000_000
    with engine.begin() as conn:
        conn.execute(retry_locks.insert().values(id=row))
    locked = select(retry_locks.c.id).where(retry_locks.c.id == row)

    def handle(envelope: Any, uow: Any) -> None:
        if envelope.aggregate_id == "a":
            uow.session.execute(locked.with_for_update(nowait=True))  # 55P03 while held
        uow.session.execute(
            retry_effects.insert().values(
                consumer=consumer, key=envelope.aggregate_id, event_id="-", n=0
            )
        )

    inbox = Inbox(engine, consumer, handle, retry=POLICY, optimistic=optimistic)
    with engine.connect() as holder, holder.begin():
        holder.execute(locked.with_for_update())
        result = inbox.apply_partition([record(0, "a"), record(1, "b")])
    assert (result.count(Action.PARK), result.count(Action.APPLY)) == (1, 1)
    (a,) = parked_rows(engine, consumer)
    assert "LockNotAvailable" in a.error and a.retry_at is not None
    assert retry_due(inbox, now=a.retry_at).applied == 1
    assert sorted(effects(engine, consumer)) == [("a", 0), ("b", 0)]


def test_the_retry_state_survives_every_python_object(stack: Any, consumer: str) -> None:
    url = stack.database_url()
    first = create_engine(url)
    fail_once = handler(
        consumer, lambda key, n, run: ConnectionRefusedError("down") if n == 0 else None
    )
    Inbox(first, consumer, fail_once, retry=POLICY).apply_partition(
        [record(0, "a"), record(1, "a")]
    )
    due = parked_rows(first, consumer)[0].retry_at
    first.dispose()
    del fail_once, first

    second = create_engine(url)  # a restarted driver: a new engine, inbox and handler
    try:
        inbox = Inbox(second, consumer, handler(consumer, lambda key, n, run: None), retry=POLICY)
        assert retry_due(inbox, now=due).applied == 2
        assert effects(second, consumer) == [("a", 0), ("a", 1)]
    finally:
        second.dispose()


def test_two_retriers_at_once_never_apply_twice(stack: Any, consumer: str) -> None:
    url = stack.database_url()
    keys = [f"k{i}" for i in range(6)]

    def slow(key: str, n: int, run: int) -> BaseException | None:
        time.sleep(0.05)  # a handler that takes a while: the retriers overlap
        return None

    setup = create_engine(url)
    records = [record(i, key) for i, key in enumerate(keys * 2)]
    down = handler(consumer, lambda key, n, run: TimeoutError("down"))
    first = Inbox(setup, consumer, down, retry=POLICY).apply_partition(records)
    assert (first.count(Action.PARK), first.count(Action.HOLD)) == (6, 6)
    due = max(r.retry_at for r in parked_rows(setup, consumer) if r.retry_at is not None)
    engines = [create_engine(url) for _ in range(2)]
    inboxes = [Inbox(e, consumer, handler(consumer, slow), retry=POLICY) for e in engines]
    start = threading.Barrier(2)
    results: list[Any] = [None, None]

    def run(n: int) -> None:
        start.wait()
        results[n] = retry_due(inboxes[n], now=due)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    try:
        assert sum(r.applied for r in results) == 12
        written = effects(setup, consumer)
        assert sorted(written) == sorted((key, n) for n, key in enumerate(keys * 2))
        for key in keys:  # each key's records in offset order
            ns = [n for k, n in written if k == key]
            assert ns == sorted(ns)
        assert parked_rows(setup, consumer) == []
    finally:
        for e in [setup, *engines]:
            e.dispose()


RETRY_JOBS: dict[str, Job] = {}


def retry_job() -> Job:
    """The job `outboxkit inbox retry --job` loads (set by the test)."""
    return RETRY_JOBS["job"]


def test_the_operator_sees_when_a_record_is_retried_its_history_and_can_retry_now(
    engine: Engine,
    consumer: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # the table's every column whole
    failing = handler(consumer, lambda key, n, run: TimeoutError("slow"))
    policy = RetryPolicy(attempts=3, first=0.0, factor=2.0, cap=0.0)  # due at once
    Inbox(engine, consumer, failing, retry=policy).apply_partition([record(0, "a")])
    Inbox(
        engine, consumer, handler(consumer, lambda key, n, run: ValueError("bad"))
    ).apply_partition([record(0, "z", topic="retries-other")])
    url = engine.url.render_as_string(hide_password=False)
    assert cli.main(["inbox", "parked", "--url", url, "--consumer", consumer]) == 0
    table = capsys.readouterr().out
    assert "retry_at" in table and "parked" in table and "attempts" in table
    assert cli.main(["inbox", "parked", "--url", url, "--consumer", consumer, "--json"]) == 0
    listed = {r["topic"]: r for r in json.loads(capsys.readouterr().out)}
    assert listed["retries-other"]["retry_at"] is None and listed[TOPIC]["retry_at"] is not None
    assert "history" not in listed[TOPIC]
    assert cli.main(["inbox", "show", "--url", url, "--id", str(listed[TOPIC]["id"])]) == 0
    shown = capsys.readouterr().out
    assert "TimeoutError: slow" in shown and "retry at" in shown and "failed" in shown

    RETRY_JOBS["job"] = Job(
        name="retries",
        topics=(TOPIC,),
        consumer=consumer,
        handlers=handler(consumer, lambda key, n, run: None),
        database_url=url,
        bootstrap_servers="localhost:1",
        retry=policy,
    )
    with engine.connect() as conn:  # the database's clock has passed the record's time
        conn.execute(text("SELECT pg_sleep(0.01)"))
    job = f"{__name__}:retry_job"
    assert cli.main(["inbox", "retry", "--job", job, "--once"]) == 0
    assert "1 applied" in capsys.readouterr().out
    assert [r.topic for r in parked_rows(engine, consumer)] == ["retries-other"]
