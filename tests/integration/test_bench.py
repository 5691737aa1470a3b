"""The benchmarks run on the real stack at small sizes and report what they measured (figures
are never asserted against thresholds: only that every measurement happened and adds up)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from devstack.stack import Stack
from outboxkit.bench import cdc, inbox, profile, writes
from outboxkit.bench.cli import fresh_database
from spark_consumers.kafka_source import _consumer, true_ends

pytestmark = pytest.mark.integration


def test_true_ends_reads_every_partition_tail_at_once(stack: Stack) -> None:
    """Idempotent batches of many records per partition: the reported end may be the last
    batch's base offset + 1; the tails read together give each partition's real end."""
    topic = f"it-ends-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers()})
    admin.create_topics([NewTopic(topic, 4, 1)])[topic].result(30)
    producer = Producer(
        {"bootstrap.servers": stack.bootstrap_servers(), "enable.idempotence": True}
    )
    counts = {0: 1500, 1: 1, 2: 0, 3: 700}
    for partition, n in counts.items():
        for i in range(n):
            producer.produce(topic, b"v", f"k{i}".encode(), partition=partition)
    assert producer.flush(30) == 0
    consumer = _consumer({"kafka.bootstrap.servers": stack.bootstrap_servers()})
    try:
        ends = true_ends(consumer, {(topic, p): 0 for p in counts})
        assert ends == {(topic, p): n for p, n in counts.items()}
        # From a later start, a partition's end is never before the start.
        assert true_ends(consumer, {(topic, 2): 5})[(topic, 2)] == 5
    finally:
        consumer.close()


def test_outbox_and_inbox_benchmarks_measure_every_variant(stack: Stack, tmp_path: Path) -> None:
    url = fresh_database(stack.database_url())
    data, markdown = writes.run(url, tmp_path, transactions=64, reps=1, writers=(1, 4))
    rates = data["transactions_per_second"]
    assert set(rates) == {f"{w} / {v}" for w in (1, 4) for v in writes.VARIANTS}
    assert all(r["samples"] and r["min"] > 0 for r in rates.values())
    assert "| 4 | outbox, delete mode |" in markdown
    assert Path(data["plots"][0]).stat().st_size > 0

    data, markdown = inbox.run(url, tmp_path, events=400, reps=1, checkpoints=(400, 2000))
    sizes = data["state_size"]
    # The classic inbox keeps a row per message; ours is bounded by partitions x window.
    assert sizes["message-id"][2000]["rows"] == 2000
    assert sizes["inbox"][2000]["rows"] == 2000 + inbox.PARTITIONS
    assert sizes["watermark"][2000]["rows"] == inbox.PARTITIONS
    assert set(data["rows_per_second"]) == set(inbox.VARIANTS)

    data, markdown = profile.run(url, tmp_path, events=400, transactions=50)
    sink, write = data["inbox_sink_seconds"], data["outbox_write_seconds"]
    assert 0 < sink["cpu (profiled)"] <= sink["wall (profiled)"] * 1.05
    assert write["SQLAlchemy (statements, ORM session)"] > 0
    assert "s waiting (" in markdown and "| SQLAlchemy (statements, ORM session) |" in markdown


def test_cdc_benchmark_sees_every_event(stack: Stack, tmp_path: Path) -> None:
    data, _ = cdc.cdc(stack, tmp_path, events=400, reps=1, writers=2)
    rates = data["events_per_second"]
    assert all(r["min"] > 0 for r in rates.values())
    assert data["params"]["record_sizes"][1] > 100  # sized from a real Debezium record
    assert json.dumps(data)  # the report is JSON-ready
    status = stack.connect_client().status(f"{stack.settings.connector_name}-{cdc.DATABASE}")
    assert status is not None and status.running  # resumed after the drain


def test_pipeline_benchmark_applies_each_event_once(
    stack: Stack, spark: object, tmp_path: Path
) -> None:
    data, _ = cdc.pipeline(stack, tmp_path, events=500, reps=1, session=spark)
    assert data["events_per_second"]["outbox -> Spark inbox"]["min"] > 0
    assert data["batches"] >= 1
    assert "addBatch" in data["micro_batch_ms"]
