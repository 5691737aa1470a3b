"""Spark consumers on the real stack: exactly once across restarts, instances and poison."""

from __future__ import annotations

import json
import shutil
import uuid

import pytest
from confluent_kafka import Producer

from inbox import Inbox, operations
from tests.jobs import record_effect
from tests.spark_helpers import (
    effect_stats,
    new_job,
    publish,
    run_once,
    total,
    wait_on_kafka,
)


@pytest.mark.parametrize(
    "events",
    [
        pytest.param(10_000, id="10k"),
        # The same at 100k: ~3 minutes on two cores, in the full run (--slow).
        pytest.param(100_000, id="100k", marks=pytest.mark.slow),
    ],
)
def test_events_exactly_once_across_restart_and_lost_checkpoint(
    stack, engine, spark, aggregate_type, tmp_path, events
):
    publish(engine, aggregate_type, events, per_tx=2000)
    wait_on_kafka(stack, aggregate_type, events)
    job = new_job(stack, aggregate_type)
    first = run_once(spark, job, tmp_path / "cp")
    assert len({r.partition for r in first}) == 4
    assert effect_stats(engine, job.consumer) == (events, events)
    # Restart from the checkpoint with new events: only the new ones are applied.
    publish(engine, aggregate_type, 1000, start=events)
    wait_on_kafka(stack, aggregate_type, events + 1000)
    second = run_once(spark, job, tmp_path / "cp")
    assert total(second, "applied") == 1000
    assert effect_stats(engine, job.consumer) == (events + 1000, events + 1000)
    # Lose the checkpoint: the job starts from the inbox watermarks and applies nothing again.
    shutil.rmtree(tmp_path / "cp")
    third = run_once(spark, job, tmp_path / "cp")
    assert total(third, "applied") == 0
    assert effect_stats(engine, job.consumer) == (events + 1000, events + 1000)


def test_two_instances_of_one_job_apply_each_event_once(
    stack, engine, spark, aggregate_type, tmp_path
):
    from spark_consumers.runner import start_job

    publish(engine, aggregate_type, 8_000)
    wait_on_kafka(stack, aggregate_type, 8_000)
    job = new_job(stack, aggregate_type, max_offsets_per_trigger=1600)
    twin = type(job)(**{**job.__dict__, "name": job.name + "_twin"})
    queries = [
        start_job(spark, j, checkpoint=tmp_path / j.name, trigger_seconds=0.5) for j in (job, twin)
    ]
    try:
        for query in queries:
            query.processAllAvailable()
    finally:
        for query in queries:
            query.stop()
    assert effect_stats(engine, job.consumer) == (8_000, 8_000)


def test_a_partition_whose_last_broker_batch_holds_many_records_is_read_to_its_end(
    stack, engine, spark, aggregate_type, tmp_path
):
    topic = f"outbox.event.{aggregate_type}"
    producer = Producer(
        {
            "bootstrap.servers": stack.bootstrap_servers(),
            "enable.idempotence": True,
            "linger.ms": 200,
        }
    )
    for n in range(2000):
        producer.produce(
            topic,
            key=b"one-key",
            value=json.dumps({"n": n}).encode(),
            headers=[
                ("id", str(uuid.uuid4()).encode()),
                ("eventType", b"Tick"),
                ("aggregateType", aggregate_type.encode()),
            ],
        )
    assert producer.flush(30) == 0
    job = new_job(stack, aggregate_type)
    rows = run_once(spark, job, tmp_path / "cp")
    assert total(rows, "applied") == 2000
    assert effect_stats(engine, job.consumer) == (2000, 2000)


def _tick(aggregate_type: str, n: int) -> dict:
    return {
        "key": f"k{n % 3}".encode(),
        "value": json.dumps({"n": n}).encode(),
        "headers": [
            ("id", str(uuid.uuid4()).encode()),
            ("eventType", b"Tick"),
            ("aggregateType", aggregate_type.encode()),
        ],
    }


def test_records_of_an_aborted_kafka_transaction_never_reach_a_handler(
    stack, engine, spark, aggregate_type, tmp_path
):
    """Committed, aborted, committed, and a transaction left open: the job applies exactly the
    committed records, and the open one only once it commits."""
    topic = f"outbox.event.{aggregate_type}"
    producer = Producer(
        {"bootstrap.servers": stack.bootstrap_servers(), "transactional.id": f"it-{topic}"}
    )
    producer.init_transactions(30)
    for numbers, commit in ((range(0, 30), True), (range(100, 130), False), (range(30, 60), True)):
        producer.begin_transaction()
        for n in numbers:
            producer.produce(topic, **_tick(aggregate_type, n))
        if commit:
            producer.commit_transaction(30)
        else:
            producer.flush(30)  # the records are in the log, then the transaction aborts
            producer.abort_transaction(30)
    job = new_job(stack, aggregate_type, exactly_once_source=True)
    run_once(spark, job, tmp_path / "cp")
    from sqlalchemy import select

    from tests.jobs import effects

    def applied() -> list[int]:
        with engine.connect() as conn:
            query = select(effects.c.n).where(effects.c.consumer == job.consumer)
            return sorted(conn.execute(query).scalars())

    assert applied() == list(range(60))
    # An open transaction's records stay invisible until it commits, then arrive once.
    producer.begin_transaction()
    for n in range(60, 70):
        producer.produce(topic, **_tick(aggregate_type, n))
    producer.flush(30)
    run_once(spark, job, tmp_path / "cp")
    assert applied() == list(range(60))
    producer.commit_transaction(30)
    run_once(spark, job, tmp_path / "cp")
    assert applied() == list(range(70))
    assert effect_stats(engine, job.consumer) == (70, 70)


def test_events_debezium_re_emits_on_resuming_are_applied_once_on_an_exactly_once_source(
    stack, engine, spark, aggregate_type, tmp_path
):
    """Debezium, resuming after a lost database connection or a task restart, searches the WAL
    for its place again and can emit events it had already committed, even on an exactly-once
    Connect worker (2 applied twice after a Postgres crash in CI). Here its two transactions as
    it writes them: the events, an aborted batch (the crash), then the last three again with
    new ones. An exactly-once job's small window skips the copies; the watermark alone
    (window 0) applies them twice."""
    topic = f"outbox.event.{aggregate_type}"
    producer = Producer(
        {"bootstrap.servers": stack.bootstrap_servers(), "transactional.id": f"it-{topic}"}
    )
    producer.init_transactions(30)
    ticks = [_tick(aggregate_type, n) for n in range(40)]
    job = new_job(stack, aggregate_type, exactly_once_source=True)
    blind = new_job(stack, aggregate_type, window=0)

    def write(batch: list[dict], commit: bool) -> None:
        producer.begin_transaction()
        for tick in batch:
            producer.produce(topic, **tick)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.flush(30)
            producer.abort_transaction(30)

    write(ticks[:30], commit=True)
    write(ticks[30:35], commit=False)  # the batch open when the connection was lost
    for consumer in (job, blind):
        run_once(spark, consumer, tmp_path / consumer.consumer)
    # Resumed: the last three again, then the rest; consumed in later micro-batches.
    write(ticks[27:], commit=True)
    rows = run_once(spark, job, tmp_path / job.consumer)
    assert total(rows, "applied") == 10 and total(rows, "resent") == 3
    assert effect_stats(engine, job.consumer) == (40, 40)
    run_once(spark, blind, tmp_path / blind.consumer)
    assert effect_stats(engine, blind.consumer) == (43, 40)


def test_poison_is_parked_same_key_held_others_applied_then_redriven(
    stack, engine, spark, aggregate_type, tmp_path
):
    # Key k0 gets n = 0, 8, 16, ...: the first is poison, the rest must wait behind it.
    publish(engine, aggregate_type, 80, keys=8, writers=1, poison={0: True})
    wait_on_kafka(stack, aggregate_type, 80)
    job = new_job(stack, aggregate_type)
    rows = run_once(spark, job, tmp_path / "cp")
    assert total(rows, "applied") == 70 and total(rows, "parked") == 10
    parked = operations.list_parked(engine, job.consumer)
    assert len(parked) == 10 and {p["key"] for p in parked} == {"k0"}
    poison = min(parked, key=lambda p: p["offset"])
    assert "ValueError: poison event for k0" in poison["error"] and poison["attempts"] == 2
    assert all("held behind" in p["error"] for p in parked if p is not poison)
    # The fix is deployed: redrive applies k0's events in their original order.
    fixed = Inbox(
        engine,
        job.consumer,
        lambda env, uow: record_effect(job.consumer, env, uow, allow_poison=True),
    )
    result = operations.redrive(fixed, poison["topic"], poison["partition"])
    assert (result.applied, result.still_parked) == (10, 0)
    assert effect_stats(engine, job.consumer) == (80, 80)
    from sqlalchemy import select

    from tests.jobs import effects

    with engine.connect() as conn:
        order = (
            conn.execute(
                select(effects.c.n)
                .where(effects.c.consumer == job.consumer, effects.c.key == "k0")
                .order_by(effects.c.seq)
            )
            .scalars()
            .all()
        )
    assert order == list(range(0, 80, 8))


pytestmark = pytest.mark.usefixtures("spark_effects_table")
