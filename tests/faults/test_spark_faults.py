"""kill -9 of the Spark driver mid-run and of Connect mid-stream: no duplicate effect, none lost."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.engine import make_url

from cdc.config import topic_for
from inbox.apply import EXACTLY_ONCE_WINDOW
from inbox.tables import recent_ids, watermarks
from tests.faults.test_connect_kill import EVENTS, check_nothing_lost, stream_with_kills
from tests.proxy import Proxy
from tests.spark_helpers import effect_stats, new_job, publish, run_once, total, wait_on_kafka
from tests.streaming import RESUME_RESENDS, seen_twice

ROOT = Path(__file__).resolve().parents[2]
DRIVER_EVENTS = 40_000  # the repeated kills' backlog (--slow)
SINGLE_KILL_EVENTS = 12_000  # three of the driver's micro-batches (OUTBOXKIT_TEST_MAX_OFFSETS)


def consume_command(
    stack, consumer: str, aggregate_type: str, checkpoint: Path, *extra: str
) -> tuple[list[str], dict[str, str]]:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OUTBOXKIT_TEST_CONSUMER": consumer,
        "OUTBOXKIT_TEST_TOPICS": topic_for(aggregate_type),
        "OUTBOXKIT_TEST_DATABASE_URL": stack.database_url(),
        "OUTBOXKIT_TEST_BOOTSTRAP": stack.bootstrap_servers(),
        "OUTBOXKIT_TEST_MAX_OFFSETS": "4000",
        **stack.driver_env(),
    }
    command = [
        sys.executable,
        "-m",
        "outboxkit.cli",
        "consume",
        "tests.jobs:effects_job",
        "--checkpoint",
        str(checkpoint),
        "--trigger",
        "0.5",
        *extra,
    ]
    return command, env


def kill_driver_mid_run(
    stack,
    engine,
    aggregate_type: str,
    checkpoint: Path,
    seed: int,
    events: int = DRIVER_EVENTS,
    within: tuple[float, float] = (0.2, 0.8),
) -> None:
    """kill -9 of a consumer driver once a share ``within`` of ``events`` is applied (drawn
    from ``seed``), then a restart from its checkpoint until every event is applied once. The
    share must end below the last micro-batch, or the driver could finish before its kill."""
    consumer = f"c-{seed:x}"[:12]
    command, env = consume_command(stack, consumer, aggregate_type, checkpoint)
    # Own session: the SIGKILL reaches the driver, its JVM and the Python workers at once.
    driver = subprocess.Popen(command, env=env, cwd=ROOT, start_new_session=True)
    point = random.Random(seed).uniform(*within) * events
    try:
        deadline = time.monotonic() + 300
        while effect_stats(engine, consumer)[0] < point:
            assert driver.poll() is None, f"consumer exited early with {driver.returncode}"
            assert time.monotonic() < deadline, "consumer made no progress"
            time.sleep(0.05)
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
    at_kill = effect_stats(engine, consumer)[0]
    print(f"killed the driver with {at_kill}/{events} applied")
    assert 0 < at_kill < events
    # Restart from the same checkpoint and run until everything is applied.
    command, env = consume_command(stack, consumer, aggregate_type, checkpoint, "--once")
    subprocess.run(command, env=env, cwd=ROOT, check=True, timeout=600)
    assert effect_stats(engine, consumer) == (events, events)


def publish_backlog(stack, engine, aggregate_type: str, events: int) -> str:
    publish(engine, aggregate_type, events, per_tx=2000)
    wait_on_kafka(stack, aggregate_type, events)
    return aggregate_type


@pytest.fixture
def backlog(stack, engine, aggregate_type, spark_effects_table) -> str:
    return publish_backlog(stack, engine, aggregate_type, DRIVER_EVENTS)


def test_driver_kill_mid_run_applies_each_event_once(
    stack, engine, aggregate_type, spark_effects_table, tmp_path
):
    """12,000 events, three of the driver's micro-batches: killed once 20-60% of them are
    applied (inside the first two), then restarted from its checkpoint."""
    events = SINGLE_KILL_EVENTS
    publish_backlog(stack, engine, aggregate_type, events)
    kill_driver_mid_run(
        stack,
        engine,
        aggregate_type,
        tmp_path / "cp",
        seed=time.time_ns(),
        events=events,
        within=(0.2, 0.6),
    )


@pytest.mark.slow
@pytest.mark.parametrize("round_", range(3))
def test_repeated_driver_kills(stack, engine, backlog, tmp_path, round_):
    kill_driver_mid_run(stack, engine, backlog, tmp_path / "cp", seed=round_ + 1)


def test_connect_kill_resends_are_absorbed_by_the_inbox_window(
    at_least_once_stack, engine, spark, aggregate_type, spark_effects_table, tmp_path
):
    """kill -9 of a Connect worker without exactly-once source while 20,000 events stream: a
    read_committed consumer sees every event (and what the worker re-sent, which it had not
    flushed: printed, not zero but by luck); the job keeps the event-id window, which skips
    every re-send."""
    counts = stream_with_kills(
        at_least_once_stack, engine, aggregate_type, kills=1, seed=time.time_ns()
    )
    resent = check_nothing_lost(counts, 1, exactly_once=False)
    job = new_job(at_least_once_stack, aggregate_type)
    assert job.dedup_window() > 0
    rows = run_once(spark, job, tmp_path / "cp")
    print(f"{resent} events re-sent by Debezium; the inbox skipped {total(rows, 'skipped')}")
    assert effect_stats(engine, job.consumer) == (EVENTS, EVENTS)
    assert total(rows, "applied") == EVENTS
    # A fresh job replays nothing, so every skip is a re-sent duplicate caught by the event ids.
    assert total(rows, "skipped") == resent


# In the full run: with exactly-once source, the default run kills Connect mid-stream in every
# outbox mode (tests/integration/test_outbox_modes.py) and in the saga's fault campaign.
@pytest.mark.slow
def test_connect_kill_with_exactly_once_source_keeps_a_small_id_window(
    stack, engine, spark, aggregate_type, spark_effects_table, tmp_path
):
    """kill -9 of the Connect worker with exactly-once source while 20,000 events stream: a
    read_committed consumer sees every event, none twice but for what Debezium may repeat when
    it resumes. The job keeps one watermark row per partition and a window of ids (against those
    re-sends, which a micro-batch after their originals' skips); every event applied once."""
    counts = stream_with_kills(stack, engine, aggregate_type, kills=1, seed=time.time_ns())
    assert check_nothing_lost(counts, 1, exactly_once=True) <= RESUME_RESENDS
    # Small micro-batches (~250 records a partition), so a copy can land in a later slice.
    job = new_job(stack, aggregate_type, exactly_once_source=True, max_offsets_per_trigger=1000)
    assert job.dedup_window() == EXACTLY_ONCE_WINDOW
    rows = run_once(spark, job, tmp_path / "cp")
    assert effect_stats(engine, job.consumer) == (EVENTS, EVENTS)
    assert total(rows, "applied") == EVENTS
    assert total(rows, "resent") == seen_twice(counts)  # every copy skipped by its event id
    with engine.connect() as conn:
        state = {
            table.name: conn.execute(
                select(func.count(table.c.partition.distinct())).where(
                    table.c.consumer == job.consumer
                )
            ).scalar_one()
            for table in (watermarks, recent_ids)
        }
    assert state == {watermarks.name: 4, recent_ids.name: 4}  # every partition keeps ids


OUTAGE_EVENTS = 8_000


def test_a_database_outage_longer_than_the_batch_retries_restarts_the_query(
    stack, engine, aggregate_type, spark_effects_table, tmp_path
):
    """The consumer's database cut off (a real TCP cut) for longer than its batches are retried
    (2 s here): the query fails, the runner restarts it from its checkpoint with backoff (the
    first restarts fail too, the database still down), and once the database is back every
    event is applied once; the driver never exits."""
    publish(engine, aggregate_type, OUTAGE_EVENTS, per_tx=1000)
    wait_on_kafka(stack, aggregate_type, OUTAGE_EVENTS)
    url = make_url(stack.database_url())
    proxy = Proxy(url.host or "127.0.0.1", url.port or 5432)
    consumer = f"outage-{time.time_ns() % 10**6}"
    command, env = consume_command(stack, consumer, aggregate_type, tmp_path / "cp")
    through = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    env |= {
        "OUTBOXKIT_TEST_DATABASE_URL": through,
        "OUTBOXKIT_TEST_BATCH_RETRY_SECONDS": "2",
        "OUTBOXKIT_TEST_MAX_OFFSETS": "1000",
    }
    log_path = tmp_path / "driver.log"
    with log_path.open("wb") as log:
        driver = subprocess.Popen(
            command, env=env, cwd=ROOT, start_new_session=True, stdout=log, stderr=log
        )
    try:
        deadline = time.monotonic() + 300
        while effect_stats(engine, consumer)[0] < OUTAGE_EVENTS // 6:
            assert driver.poll() is None, log_path.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, "consumer made no progress"
            time.sleep(0.05)
        proxy.cut()
        time.sleep(12)  # the query fails after 2 s of retries; restarts fail meanwhile
        proxy.restore()
        deadline = time.monotonic() + 300
        while effect_stats(engine, consumer)[0] < OUTAGE_EVENTS:
            assert driver.poll() is None, log_path.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, log_path.read_text(errors="replace")[-3000:]
            time.sleep(0.2)
        time.sleep(2)  # anything applied twice would show by now
        assert effect_stats(engine, consumer) == (OUTAGE_EVENTS, OUTAGE_EVENTS)
        assert driver.poll() is None  # it rode the outage out
    finally:
        os.killpg(driver.pid, signal.SIGTERM)
        driver.wait(timeout=120)
        proxy.cut()
    text = log_path.read_text(errors="replace")
    assert "restarted from its checkpoint" in text, text[-3000:]
    assert "StackOverflowError" not in text


START_EVENTS = 500


def test_a_consumer_started_while_its_database_and_kafka_are_away_waits_for_them(
    stack, engine, aggregate_type, spark_effects_table, tmp_path
):
    """`outboxkit consume` started while the job's Kafka and database refuse connections (a
    restart, a failover): it asks again with the running consumer's back-off instead of exiting,
    and once both are back it applies every event once (--once: then it ends)."""
    publish(engine, aggregate_type, START_EVENTS, per_tx=100)
    wait_on_kafka(stack, aggregate_type, START_EVENTS)
    url = make_url(stack.database_url())
    database = Proxy(url.host or "127.0.0.1", url.port or 5432)
    host, port = stack.bootstrap_servers().split(",")[0].rsplit(":", 1)
    kafka = Proxy(host, int(port))
    database.cut()
    kafka.cut()
    consumer = f"start-{time.time_ns() % 10**6}"
    command, env = consume_command(stack, consumer, aggregate_type, tmp_path / "cp", "--once")
    through = url.set(host="127.0.0.1", port=database.port).render_as_string(hide_password=False)
    env |= {
        "OUTBOXKIT_TEST_DATABASE_URL": through,
        "OUTBOXKIT_TEST_BOOTSTRAP": f"127.0.0.1:{kafka.port}",
    }
    log_path = tmp_path / "driver.log"
    with log_path.open("wb") as log:
        driver = subprocess.Popen(
            command, env=env, cwd=ROOT, start_new_session=True, stdout=log, stderr=log
        )
    try:
        time.sleep(12)  # Kafka asked at least once more meanwhile
        assert driver.poll() is None, log_path.read_text(errors="replace")[-3000:]
        kafka.restore()
        time.sleep(3)  # then the database, still away, is asked again
        assert driver.poll() is None, log_path.read_text(errors="replace")[-3000:]
        database.restore()
        assert driver.wait(timeout=300) == 0, log_path.read_text(errors="replace")[-3000:]
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGTERM)
            driver.wait(timeout=120)
        database.cut()
        kafka.cut()
    assert effect_stats(engine, consumer) == (START_EVENTS, START_EVENTS)
    text = log_path.read_text(errors="replace")
    assert f"Kafka at 127.0.0.1:{kafka.port}: KafkaException" in text, text[-3000:]
    assert "its database at 127.0.0.1: OperationalError" in text, text[-3000:]
