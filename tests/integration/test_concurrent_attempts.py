"""Concurrent attempts of one partition's slice on the real Postgres: Spark speculation, or a task
re-run while a lost executor's attempt still runs, makes two (or more) attempts apply the same
offsets at once. Each attempt runs the sink's task body (`apply_batches`, what ``mapInArrow``
runs per Spark task) on its own thread and connection; the watermark row lock (`Recorder.lock`)
must let exactly one of them apply each record, with and without the id window."""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pytest
from sqlalchemy import func, select, text
from sqlalchemy.engine import make_url

from inbox.tables import watermarks
from outbox import Outbox
from outbox.table import outbox_table
from outboxkit.kernel.wire.record import KafkaRecord
from spark_consumers.job import Job
from spark_consumers.sink import apply_batches
from tests.integration.test_inbox_apply import effect_counts, effects, ids_of, record, recorder

TOPIC = "concurrent"
FOLLOW_UP = "it_concurrent_follow_up"  # the aggregate type of the events the handler publishes
# Spark's Kafka source schema, as mapInArrow hands it to the sink.
KAFKA_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    ]
)


@dataclass(frozen=True)
class Mode:
    """A dedup mode: the watermark alone (window 0: a producer that never writes an event twice,
    no re-sends reach the consumer), or the id window against a source's re-sends."""

    exactly_once_source: bool
    window: int | None
    resends: bool

    def source_of(self, offset: int) -> int:
        """The offset whose event the record at ``offset`` carries: itself, or for one record in
        ten from offset 50 on (with re-sends) the event 45 offsets earlier, sent again."""
        return offset - 45 if self.resends and offset >= 50 and offset % 10 == 9 else offset


NAMED_MODES = {
    "watermark": Mode(exactly_once_source=True, window=0, resends=False),
    "id-window": Mode(exactly_once_source=False, window=1000, resends=True),
}
MODES = [pytest.param(mode, id=name) for name, mode in NAMED_MODES.items()]


@pytest.fixture(scope="module", autouse=True)
def effects_table(engine):
    effects.metadata.create_all(engine)


@pytest.fixture
def consumer():
    return f"ca-{uuid.uuid4().hex[:8]}"


def stream(mode: Mode, length: int) -> list[KafkaRecord]:
    """The partition's records at offsets 0..length-1, as every attempt reads them."""
    ids = [str(uuid.uuid4()) for _ in range(length)]
    return [
        record(TOPIC, o, f"k{o % 7}", o, event_id=ids[mode.source_of(o)]) for o in range(length)
    ]


def arrow_slice(records: Sequence[KafkaRecord]) -> pa.RecordBatch:
    """``records`` as one Arrow batch in Spark's Kafka source schema."""
    return pa.RecordBatch.from_pydict(
        {
            "key": [r.key for r in records],
            "value": [r.value for r in records],
            "topic": [r.topic for r in records],
            "partition": [r.partition for r in records],
            "offset": [r.offset for r in records],
            "timestamp": [0 for _ in records],
            "timestampType": [0 for _ in records],
            "headers": [[{"key": k, "value": v} for k, v in r.headers] for r in records],
        },
        schema=KAFKA_SCHEMA,
    )


class Gate:
    """Holds an attempt inside its inbox transaction (its lock taken, its first event being
    applied) until opened; knows the attempt's backend."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.opened = threading.Event()
        self.pid: int | None = None

    def hold(self, session: Any) -> None:
        if self.entered.is_set():
            return
        self.pid = session.execute(text("SELECT pg_backend_pid()")).scalar_one()
        self.entered.set()
        assert self.opened.wait(60), "the gate was never opened"

    def __enter__(self) -> Gate:
        return self

    def __exit__(self, *exc: object) -> None:
        self.opened.set()  # a failed assertion must not leave the held attempt waiting


def handler(consumer: str, gate: Gate | None = None, pause: float = 0.0) -> Callable[..., None]:
    """One business row and one follow-up event in the consumer's outbox per event; ``pause``
    seconds per event keep an attempt's transaction open long enough for the others to race it."""
    business = recorder(consumer)

    def handle(envelope, uow):
        if gate is not None:
            gate.hold(uow.session)
        time.sleep(pause)
        business(envelope, uow)
        uow.publish(
            aggregate_type=FOLLOW_UP,
            aggregate_id=envelope.aggregate_id,
            event_type="Followed",
            payload={"consumer": consumer, "source": str(envelope.event_id)},
            caused_by=envelope,
        )

    return handle


def job(stack, consumer, mode: Mode, *, isolation: str | None = None, **handling: Any) -> Job:
    """The consumer's job, its database URL optionally opening transactions at ``isolation``."""
    url = make_url(stack.database_url())
    if isolation is not None:
        level = isolation.replace(" ", "\\ ")  # libpq's options escape spaces
        url = url.update_query_dict({"options": f"-c default_transaction_isolation={level}"})
    return Job(
        name=consumer.replace("-", "_"),
        topics=(TOPIC,),
        consumer=consumer,
        handlers=handler(consumer, **handling),
        database_url=url.render_as_string(hide_password=False),
        bootstrap_servers=stack.bootstrap_servers(),
        exactly_once_source=mode.exactly_once_source,
        window=mode.window,
        outbox=Outbox(mode="retain"),  # the follow-up rows stay, to be counted
        batch_retry_seconds=30,  # a broken test fails in seconds, not after the default 300
        # A gate holds an attempt idle in its transaction as long as a test needs: Postgres
        # leaves it alone (the frozen-attempt test turns the timeout on).
        stalled_transaction_seconds=0,
    )


def attempt(job_: Job, records: Sequence[KafkaRecord], start: threading.Barrier | None = None):
    """One Spark task attempt over ``records``: the sink's task body, its one result row."""
    if start is not None:
        start.wait(timeout=60)
    (batch,) = apply_batches([job_], iter([arrow_slice(records)]))
    (row,) = batch.to_pylist()
    return row


def at_once(attempts: Sequence[tuple[Job, Sequence[KafkaRecord]]]) -> list[dict[str, Any]]:
    """Run the attempts on their own threads, released together; their result rows (an
    attempt's error is raised here)."""
    start = threading.Barrier(len(attempts))
    with ThreadPoolExecutor(len(attempts)) as pool:
        futures = [pool.submit(attempt, j, records, start) for j, records in attempts]
        return [f.result(timeout=120) for f in futures]


def follow_ups(engine, consumer) -> dict[str, int]:
    """How many follow-up outbox rows the handler wrote, by consumed event id."""
    source = outbox_table.c.payload["source"].astext
    with engine.connect() as conn:
        rows = conn.execute(
            select(source, func.count())
            .where(
                outbox_table.c.aggregatetype == FOLLOW_UP,
                outbox_table.c.payload["consumer"].astext == consumer,
            )
            .group_by(source)
        ).all()
    return {r[0]: r[1] for r in rows}


def watermark(engine, consumer) -> int:
    with engine.connect() as conn:
        return conn.execute(
            select(watermarks.c.offset).where(
                watermarks.c.consumer == consumer, watermarks.c.topic == TOPIC
            )
        ).scalar_one()


def assert_applied_once(engine, consumer, records: Sequence[KafkaRecord]) -> None:
    """Every event of ``records`` has one business row and one follow-up event, and the
    watermark is their last offset."""
    once = dict.fromkeys(ids_of(records), 1)
    assert effect_counts(engine, consumer) == once
    assert follow_ups(engine, consumer) == once
    assert watermark(engine, consumer) == records[-1].offset


def new_events(records: Sequence[KafkaRecord], before: Sequence[KafkaRecord] = ()) -> int:
    """How many distinct events ``records`` carry that ``before`` did not."""
    return len(set(ids_of(records)) - set(ids_of(before)))


def blocked_by(engine, pid: int, timeout: float = 30.0) -> list[int]:
    """The backends waiting for a lock held by backend ``pid`` (waits until there is one)."""
    deadline = time.monotonic() + timeout
    with engine.connect() as conn:
        while time.monotonic() < deadline:
            waiting = conn.execute(
                text(
                    "SELECT pid FROM pg_stat_activity WHERE :pid = ANY(pg_blocking_pids(pid))"
                    " AND wait_event_type = 'Lock'"
                ),
                {"pid": pid},
            ).scalars()
            found = list(waiting)
            if found:
                return found
            time.sleep(0.02)
    raise AssertionError(f"no backend waited for the lock of backend {pid}")


ISOLATIONS = [
    pytest.param(mode, n, isolation, id=f"{name}-{n}-{isolation or 'read committed'}")
    for name, mode in NAMED_MODES.items()
    for n, isolation in [(2, None), (4, None), (4, "repeatable read"), (4, "serializable")]
]


@pytest.mark.parametrize(("mode", "attempts", "isolation"), ISOLATIONS)
def test_attempts_of_one_slice_at_once_apply_each_event_once(
    engine, stack, consumer, mode, attempts, isolation
):
    # Two micro-batches: the first creates the partition's watermark row (the attempts meet on
    # its INSERT), the second finds it (they meet on SELECT ... FOR UPDATE).
    records = stream(mode, 200)
    consumer_job = job(stack, consumer, mode, isolation=isolation, pause=0.002)
    for start, end in [(0, 100), (100, 200)]:
        rows = at_once([(consumer_job, records[start:end])] * attempts)
        # One attempt applied the slice; every other one waited and skipped all of it.
        applied = sorted(r["applied"] for r in rows)
        assert applied == [0] * (attempts - 1) + [new_events(records[start:end], records[:start])]
        assert all(r["watermark"] == end - 1 and r["parked"] == 0 for r in rows)
        assert sorted(r["skipped"] for r in rows)[1:] == [end - start] * (attempts - 1)
        retries = [r["retries"] for r in rows]
        if isolation is None:  # read committed: the lock orders them, nothing is retried
            assert retries == [0] * attempts
        else:  # a loser's snapshot predates the winner's commit: a serialization failure,
            assert sum(retries) > 0 and max(retries) == 1  # retried once by the sink, skipped
        assert_applied_once(engine, consumer, records[:end])


@pytest.mark.parametrize("mode", MODES)
def test_overlapping_slices_at_once_apply_each_event_once(engine, stack, consumer, mode):
    # A re-run of an earlier batch beside later batches starting at the watermark (49): every
    # attempt starts at or below the watermark + 1, as a Spark batch does.
    records = stream(mode, 150)
    consumer_job = job(stack, consumer, mode, pause=0.002)
    attempt(consumer_job, records[:50])
    slices = [records[0:100], records[50:150], records[25:125], records[50:150]]
    rows = at_once([(consumer_job, s) for s in slices])
    assert sum(r["applied"] for r in rows) == new_events(records, records[:50])
    assert all(r["retries"] == 0 and r["parked"] == 0 for r in rows)
    assert_applied_once(engine, consumer, records)


@pytest.mark.parametrize("existing", [False, True], ids=["new-partition", "known-partition"])
@pytest.mark.parametrize("mode", MODES)
def test_an_attempt_arriving_while_another_holds_the_lock_waits_then_skips_what_it_applied(
    engine, stack, consumer, mode, existing
):
    records = stream(mode, 150)
    if existing:  # the watermark row exists: B waits on FOR UPDATE, else on A's INSERT of it
        attempt(job(stack, consumer, mode), records[:10])
    gate = Gate()
    with ThreadPoolExecutor(2) as pool, gate:
        first = pool.submit(attempt, job(stack, consumer, mode, gate=gate), records[0:100])
        assert gate.entered.wait(30)  # A holds the partition's lock, inside its handler
        second = pool.submit(attempt, job(stack, consumer, mode), records[50:150])
        assert gate.pid is not None
        blocked_by(engine, gate.pid)  # B waits for A's transaction
        before = records[:10] if existing else []
        assert effect_counts(engine, consumer) == dict.fromkeys(ids_of(before), 1)
        gate.opened.set()
        a, b = first.result(timeout=60), second.result(timeout=60)
    assert a["applied"] == new_events(records[:100], before) and a["watermark"] == 99
    # B skipped A's offsets as replays, and in the id window the re-sends of A's events.
    assert b["applied"] == new_events(records[100:150], records[:100])
    assert b["skipped"] == 50 + (50 - b["applied"]) and b["watermark"] == 149
    assert a["retries"] == b["retries"] == 0
    assert_applied_once(engine, consumer, records)


@pytest.mark.parametrize("mode", MODES)
def test_a_lost_attempt_holding_the_lock_is_retried_and_skips(engine, stack, consumer, mode):
    # A's executor loses its connection mid-transaction (the executor is lost, its task re-run
    # as B) while A's Python worker still runs: A's transaction is rolled back, B applies the
    # slice, and A's next statement fails; the sink retries A, which then skips everything.
    records = stream(mode, 100)
    attempt(job(stack, consumer, mode), records[:10])
    gate = Gate()
    with ThreadPoolExecutor(2) as pool, gate:
        first = pool.submit(attempt, job(stack, consumer, mode, gate=gate), records)
        assert gate.entered.wait(30)
        second = pool.submit(attempt, job(stack, consumer, mode), records)
        assert gate.pid is not None
        blocked_by(engine, gate.pid)
        with engine.connect() as conn:
            assert conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": gate.pid}).scalar()
        b = second.result(timeout=60)  # B no longer waits: A's transaction is gone
        assert b["applied"] == new_events(records, records[:10]) and b["retries"] == 0
        gate.opened.set()
        a = first.result(timeout=60)
    assert a["retries"] >= 1 and a["applied"] == 0 and a["skipped"] == 100
    assert a["watermark"] == b["watermark"] == 99
    assert_applied_once(engine, consumer, records)


@pytest.mark.parametrize("mode", MODES)
def test_a_frozen_attempt_loses_its_transaction_and_the_copy_applies(engine, stack, consumer, mode):
    # A's executor freezes mid-slice (a GC pause, a stopped VM): its session sits idle inside
    # its transaction, holding the partition's lock, while Spark's speculative copy B comes
    # for it. Postgres ends A's session after the job's stalled_transaction_seconds, B applies
    # the slice while A is still frozen, and A, thawed, fails, is retried and skips everything.
    records = stream(mode, 100)
    attempt(job(stack, consumer, mode), records[:10])
    frozen = dataclasses.replace(
        job(stack, consumer, mode, gate=(gate := Gate())), stalled_transaction_seconds=2.0
    )
    with ThreadPoolExecutor(2) as pool, gate:
        first = pool.submit(attempt, frozen, records)
        assert gate.entered.wait(30)
        second = pool.submit(attempt, job(stack, consumer, mode), records)
        b = second.result(timeout=60)  # while A is still held inside its transaction
        assert not gate.opened.is_set()
        with engine.connect() as conn:  # Postgres ended A's session
            alive = "SELECT count(*) FROM pg_stat_activity WHERE pid = :p"
            assert conn.execute(text(alive), {"p": gate.pid}).scalar_one() == 0
        assert b["applied"] == new_events(records, records[:10]) and b["retries"] == 0
        gate.opened.set()
        a = first.result(timeout=60)
    assert a["retries"] >= 1 and a["applied"] == 0 and a["skipped"] == 100
    assert a["watermark"] == b["watermark"] == 99
    assert_applied_once(engine, consumer, records)
