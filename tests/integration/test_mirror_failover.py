"""A consumer job moved mid-run from the stack's Kafka cluster to a MirrorMaker 2 replica: the
mirrored topic keeps its name but has another cluster id, topic id and offsets, so the job starts
its partitions over on the replica and judges each record by its source position. Every event
is applied once: none lost, none twice. On the replica the job re-reads in small micro-batches
(many slices per partition, at the default window) while new events keep arriving, the shape in
which a re-read's last tie was once applied again."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from sqlalchemy import select

from cdc.config import topic_for
from inbox.tables import watermarks
from outboxkit.kernel.wire.record import header_map
from outboxkit_workshop.devstack import artifacts, mirror
from tests.faults.test_spark_faults import consume_command
from tests.integration.test_topic_moves import (
    assert_audit_clean,
    start_driver,
    stop_driver,
    wait_applied,
)
from tests.kafka import read_records
from tests.spark_helpers import effect_stats, publish, wait_on_kafka

FIRST, SECOND, DURING = 1_500, 1_000, 600
REPLICA_BATCH = 150  # records per micro-batch on the replica: the re-read spans ~20


@pytest.fixture
def replica(stack, tmp_path: Path) -> Iterator[mirror.Cluster]:
    """A second single-node Kafka cluster (its own cluster id), stopped after the test."""
    found = artifacts.locate(stack.settings.cache_dir)
    with mirror.running_cluster(found.java, found.broker_libs, tmp_path / "replica") as cluster:
        yield cluster


def abort_one(bootstrap: str, topic: str) -> str:
    """Write one event-like record to ``topic`` in a transaction that is aborted; its id."""
    event_id = str(uuid.uuid4())
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"it-{event_id}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, key="k0", value=b'{"n": -1}', headers=[("id", event_id)])
    producer.flush(30)
    producer.abort_transaction(30)
    return event_id


def ids_on(bootstrap: str, topic: str, distinct: int, timeout: float = 180) -> set[str]:
    """The distinct event ids of ``topic`` (committed records), once ``distinct`` are there."""
    records = read_records(
        bootstrap,
        [topic],
        until=lambda got: len({header_map(r.headers)["id"] for r in got}) >= distinct,
        timeout=timeout,
    )
    return {header_map(r.headers)["id"] for r in records}


def micro_batches(checkpoint: Path) -> int:
    """How many micro-batches were planned under ``checkpoint`` (its queries' offset logs,
    also those moved aside)."""
    return sum(1 for f in checkpoint.glob("*/offsets/*") if f.name.isdigit())


def publish_slowly(engine, aggregate_type: str, start: int, count: int) -> None:
    """``count`` events in small transactions over a few seconds, from ``start``."""
    for at in range(start, start + count, 20):
        publish(engine, aggregate_type, 20, start=at, keys=16, writers=1, per_tx=20)
        time.sleep(0.1)


def test_a_job_moved_to_a_mirrored_cluster_applies_every_event_once(
    stack, engine, spark_effects_table, aggregate_type, replica, tmp_path
):
    started = time.monotonic()
    found = artifacts.locate(stack.settings.cache_dir)
    topic = topic_for(aggregate_type, topic_prefix=stack.settings.topic_prefix)
    consumer = f"mirror-{aggregate_type[-6:]}"
    checkpoint = tmp_path / "cp"
    publish(engine, aggregate_type, FIRST, keys=16)
    wait_on_kafka(stack, aggregate_type, FIRST)
    with mirror.running_mirror(
        found.java,
        found.connect_libs,
        tmp_path / "mm2",
        stack.bootstrap_servers(),
        replica.bootstrap,
        [topic],
    ):
        command, env = consume_command(stack, consumer, aggregate_type, checkpoint)
        env["OUTBOXKIT_TEST_LEDGER"] = "1"  # for the audit
        driver = start_driver(command, env)
        try:
            wait_applied(engine, consumer, FIRST, driver)
        finally:
            stop_driver(driver)
        with engine.connect() as conn:
            before = conn.execute(select(watermarks).where(watermarks.c.consumer == consumer)).all()
        assert before and {r.cluster_id for r in before} != {replica.cluster_id}
        # The source cluster keeps going after the consumer left it; an aborted transaction
        # on it must not reach the replica.
        aborted = abort_one(stack.bootstrap_servers(), topic)
        publish(engine, aggregate_type, SECOND, start=FIRST, keys=16)
        on_replica = ids_on(replica.bootstrap, topic, FIRST + SECOND)
        assert len(on_replica) == FIRST + SECOND and aborted not in on_replica
        print(f"mirrored {len(on_replica)} events after {time.monotonic() - started:.0f}s")

        env = {
            **env,
            "OUTBOXKIT_TEST_BOOTSTRAP": replica.bootstrap,
            "OUTBOXKIT_TEST_MAX_OFFSETS": str(REPLICA_BATCH),
        }
        total = FIRST + SECOND + DURING
        load = threading.Thread(  # under load: events keep coming while the job re-reads
            target=publish_slowly, args=(engine, aggregate_type, FIRST + SECOND, DURING)
        )
        before_batches = micro_batches(checkpoint)
        driver = start_driver(command, env)
        load.start()
        try:
            wait_applied(engine, consumer, total, driver)
            time.sleep(3)  # a late duplicate would show now
            assert effect_stats(engine, consumer) == (total, total)
        finally:
            load.join()
            stop_driver(driver)
        batches = micro_batches(checkpoint) - before_batches
        print(f"the replica's run took {batches} micro-batches")
        assert batches >= 10
    with engine.connect() as conn:
        after = conn.execute(select(watermarks).where(watermarks.c.consumer == consumer)).all()
    assert after and {r.cluster_id for r in after} == {replica.cluster_id}
    assert {r.topic_id for r in after}.isdisjoint({r.topic_id for r in before})
    assert all(r.stopped is None and r.sources for r in after)
    moved_aside = [p.name for p in checkpoint.iterdir() if ".moved-" in p.name]
    assert moved_aside, "the checkpoint of the source cluster's topic was not moved aside"
    assert_audit_clean(stack, engine, consumer, topic, on_topic=total, bootstrap=replica.bootstrap)
    print(f"failover test took {time.monotonic() - started:.0f}s")
