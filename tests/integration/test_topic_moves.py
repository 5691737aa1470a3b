"""A consumer job on the real stack when its topic's offsets change meaning: the topic deleted
and re-created under the running job. Every event is applied once: none lost, none twice."""

from __future__ import annotations

import os
import signal
import subprocess
import time

from confluent_kafka.admin import AdminClient, NewTopic
from sqlalchemy import select

from cdc.config import topic_for
from inbox.tables import watermarks
from spark_consumers.audit import audit
from tests.faults.test_spark_faults import ROOT, consume_command
from tests.jobs import make_job
from tests.spark_helpers import effect_stats, publish, wait_on_kafka


def recreate(bootstrap: str, topic: str, partitions: int) -> None:
    """Delete ``topic``, wait until it is gone, create it again (new topic id, offsets at 0)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result(timeout=60)
    deadline = time.monotonic() + 60
    while topic in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, f"{topic} was not deleted"
        time.sleep(0.2)
    try:
        admin.create_topics([NewTopic(topic, partitions)])[topic].result(timeout=60)
    except Exception as exc:  # a producer's metadata request may have auto-created it first
        if "TOPIC_ALREADY_EXISTS" not in str(exc):
            raise


def start_driver(command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    """`outboxkit consume` in its own session: SIGTERM to its group reaches its JVM too."""
    return subprocess.Popen(command, env=env, cwd=ROOT, start_new_session=True)


def stop_driver(driver: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the driver's group, SIGKILL after a minute."""
    if driver.poll() is not None:
        return
    os.killpg(driver.pid, signal.SIGTERM)
    try:
        driver.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()


def wait_applied(engine, consumer: str, expected: int, driver, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while effect_stats(engine, consumer)[1] < expected:
        assert driver.poll() is None, f"consumer exited with {driver.returncode}"
        assert time.monotonic() < deadline, f"applied {effect_stats(engine, consumer)}"
        time.sleep(0.5)


def test_a_topic_recreated_under_a_running_job_loses_nothing_and_doubles_nothing(
    stack, engine, spark_effects_table, aggregate_type, tmp_path
):
    topic = topic_for(aggregate_type, topic_prefix=stack.settings.topic_prefix)
    consumer = f"moved-{aggregate_type[-6:]}"
    publish(engine, aggregate_type, 2_000, keys=16)
    wait_on_kafka(stack, aggregate_type, 2_000)
    command, env = consume_command(stack, consumer, aggregate_type, tmp_path / "cp")
    env["OUTBOXKIT_TEST_LEDGER"] = "1"  # for the audit
    driver = start_driver(command, env)
    try:
        wait_applied(engine, consumer, 2_000, driver)
        with engine.connect() as conn:
            before = {
                r.partition: r.topic_id
                for r in conn.execute(select(watermarks).where(watermarks.c.consumer == consumer))
            }
        assert len(before) == 4 and None not in before.values()
        recreate(stack.bootstrap_servers(), topic, 4)
        publish(engine, aggregate_type, 1_500, start=2_000, keys=16)
        wait_applied(engine, consumer, 3_500, driver)
        time.sleep(3)  # a late duplicate would show now
        assert effect_stats(engine, consumer) == (3_500, 3_500)
        with engine.connect() as conn:
            after = conn.execute(select(watermarks).where(watermarks.c.consumer == consumer)).all()
        assert {r.topic_id for r in after}.isdisjoint(before.values())  # the new topic's id
        assert all(r.stopped is None and r.sources for r in after)
    finally:
        stop_driver(driver)
    moved_aside = [p.name for p in (tmp_path / "cp").iterdir() if ".moved-" in p.name]
    assert moved_aside, "the checkpoint of the old topic was not moved aside"
    assert_audit_clean(stack, engine, consumer, topic, on_topic=1_500)


def assert_audit_clean(
    stack, engine, consumer: str, topic: str, on_topic: int, bootstrap: str | None = None
) -> None:
    """`outboxkit audit` of the consumer: every event on the topic applied once, none lost."""
    servers = bootstrap or stack.bootstrap_servers()
    job = make_job(consumer, [topic], stack.database_url(), servers, ledger=True)
    with engine.connect() as conn:
        report = audit(job, conn)
    totals = report.as_dict()["totals"]
    assert report.ok, totals
    assert totals["applied"] == on_topic and totals["pending"] == 0, totals


def test_a_rewind_under_a_running_job_reads_the_rewound_records_again(
    stack, engine, spark_effects_table, aggregate_type, tmp_path
):
    """`outboxkit inbox rewind` of every partition to -1 while the job runs: the job's query,
    reading from its checkpoint, is refused its next slice (the rewind counts as a start-over),
    restarts from the inbox's watermarks and applies every event once more, as asked."""
    from outboxkit import cli

    topic = topic_for(aggregate_type, topic_prefix=stack.settings.topic_prefix)
    consumer = f"rewound-{aggregate_type[-6:]}"
    publish(engine, aggregate_type, 1_000, keys=16)
    wait_on_kafka(stack, aggregate_type, 1_000)
    command, env = consume_command(stack, consumer, aggregate_type, tmp_path / "cp")
    driver = start_driver(command, env)
    try:
        wait_applied(engine, consumer, 1_000, driver)
        for partition in range(4):
            where = ["--consumer", consumer, "--topic", topic, "--partition", str(partition)]
            url = ["--url", stack.database_url()]
            assert cli.main(["inbox", "rewind", *where, "--offset", "-1", "--yes", *url]) == 0
        publish(engine, aggregate_type, 200, start=1_000, keys=16)  # the query's next batch
        deadline = time.monotonic() + 300
        while effect_stats(engine, consumer)[0] < 2_200:
            assert driver.poll() is None, f"consumer exited with {driver.returncode}"
            assert time.monotonic() < deadline, f"effects {effect_stats(engine, consumer)}"
            time.sleep(0.5)
        time.sleep(3)  # a third application would show now
        assert effect_stats(engine, consumer) == (2_200, 1_200)  # the first 1,000 twice
    finally:
        stop_driver(driver)
    moved_aside = [p.name for p in (tmp_path / "cp").iterdir() if ".moved-" in p.name]
    assert moved_aside, "the checkpoint from before the rewind was not moved aside"
