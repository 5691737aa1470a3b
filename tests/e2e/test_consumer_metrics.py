"""The consumer driver's /metrics on the running saga: per partition, what the inbox tables and
Kafka say, and batch counters that add up to the ledger."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
from confluent_kafka import Consumer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import func, select

from cdc.config import topic_for
from inbox.tables import ledger, parked, watermarks
from outboxkit_workshop.saga import rules
from outboxkit_workshop.saga_harness.processes import PARTITIONS, Saga

# The topics each saga job reads (outboxkit_workshop.saga.jobs).
JOB_TOPICS = rules.READS
Key = tuple[str, str, str, int]  # consumer job, consumer, topic, partition
Samples = dict[tuple[str, Key], float]


def scrape(saga: Saga) -> Samples:
    """The driver's partition samples, by (sample name, key)."""
    text = httpx.get(f"{saga.urls['consumers']}/metrics", timeout=30).text
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if "partition" in s.labels and "reason" not in s.labels:
                labels = s.labels
                key = (labels["consumer_job"], labels["consumer"], labels["topic"])
                found[(s.name, (*key, int(labels["partition"])))] = s.value
    return found


def tables_and_kafka(saga: Saga) -> Samples:
    """What the inbox tables and Kafka's end offsets say the scrape must show."""
    prefix = saga.stack.settings.topic_prefix
    kafka = Consumer({**saga.stack.kafka_client_config(), "group.id": "outboxkit-e2e-metrics"})
    expected: Samples = {}
    try:
        for service, aggregates in JOB_TOPICS.items():
            with saga.engines[service].connect() as conn:
                marks = {
                    (t, p): o
                    for t, p, o in conn.execute(
                        select(
                            watermarks.c.topic, watermarks.c.partition, watermarks.c.offset
                        ).where(watermarks.c.consumer == service)
                    ).all()
                }
                counts = {
                    table.name: {
                        (t, p): n
                        for t, p, n in conn.execute(
                            select(table.c.topic, table.c.partition, func.count())
                            .where(table.c.consumer == service)
                            .group_by(table.c.topic, table.c.partition)
                        ).all()
                    }
                    for table in (ledger, parked)
                }
            for topic in (topic_for(a, topic_prefix=prefix) for a in aggregates):
                for partition in range(PARTITIONS):
                    key: Key = (f"saga_{service}", service, topic, partition)
                    low, end = kafka.get_watermark_offsets(
                        TopicPartition(topic, partition), timeout=10, cached=False
                    )
                    mark = marks.get((topic, partition))
                    if mark is not None:
                        expected[("outboxkit_consumer_watermark", key)] = mark
                    expected[("outboxkit_consumer_end_offset", key)] = end
                    expected[("outboxkit_consumer_lag", key)] = end - (
                        low if mark is None else mark + 1
                    )
                    expected[("outboxkit_consumer_ledger_applied_total", key)] = counts[
                        "inbox_ledger"
                    ].get((topic, partition), 0)
                    expected[("outboxkit_consumer_parked", key)] = counts["inbox_parked"].get(
                        (topic, partition), 0
                    )
                    expected[("outboxkit_consumer_stopped", key)] = 0  # nothing moved
    finally:
        kafka.close()
    return expected


def settled(saga: Saga, timeout: float = 180) -> tuple[Samples, Samples]:
    """A scrape that equals the tables and Kafka read around it and the scrape before it: the
    consumers have applied what is left, and the driver has counted the last batch's results
    (it hears of them only after the batch's transactions committed)."""
    deadline = time.monotonic() + timeout
    previous: Samples = {}
    while True:
        before = tables_and_kafka(saga)
        got = scrape(saga)
        after = tables_and_kafka(saga)
        shown = {k: got.get(k) for k in after}
        if (before == after == shown and got == previous) or time.monotonic() > deadline:
            return got, after
        previous = got
        time.sleep(2)


def test_driver_metrics_match_the_inbox_tables_and_kafka(saga: Saga) -> None:
    status = {p["name"]: p for p in saga.status()}
    assert status["consumers"]["url"] == saga.urls["consumers"]
    recorded = json.loads(saga.state_file.read_text())["processes"]["consumers"]
    assert status["consumers"]["port"] == recorded["port"] is not None

    start, _ = settled(saga)
    placed = saga.place_orders(20, seed=23)
    pending = saga.wait_final(placed, timeout=300)
    assert not pending, f"{len(pending)} orders not final:\n{saga.logs_tail()}"
    got, expected = settled(saga)

    shown = {k: got.get(k) for k in expected}
    for name, key in sorted(expected, key=lambda nk: (nk[1], nk[0])):
        print(f"{key} {name} {shown[(name, key)]} (tables/Kafka {expected[(name, key)]})")
    assert shown == expected
    # Every job's partitions are there, and the new orders were applied.
    assert {k[0] for _, k in expected} == {"saga_payments", "saga_shipping", "saga_orders"}
    applied = "outboxkit_consumer_ledger_applied_total"
    assert sum(v for (n, _), v in got.items() if n == applied) > sum(
        v for (n, _), v in start.items() if n == applied
    )
    # Each service's own /metrics shows the same lag for the partitions its inbox applied.
    for service in JOB_TOPICS:
        text = httpx.get(f"{saga.urls[service]}/metrics", timeout=30).text
        lags = {
            (s.labels["topic"], int(s.labels["partition"])): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name == "outboxkit_inbox_lag" and s.labels["consumer"] == service
        }
        assert lags
        for (topic, partition), lag in lags.items():
            key = (f"saga_{service}", service, topic, partition)
            assert lag == got[("outboxkit_consumer_lag", key)], key
    # The micro-batches' counters grew exactly as the ledger did, partition by partition.
    counted = "outboxkit_consumer_applied_total"
    for name, key in expected:
        if name == applied:
            grew = got.get((counted, key), 0) - start.get((counted, key), 0)
            assert grew == got[(applied, key)] - start.get((applied, key), 0), key


def test_driver_metrics_show_the_slot_of_each_jobs_database(saga: Saga) -> None:
    text = httpx.get(f"{saga.urls['consumers']}/metrics", timeout=30).text
    families: dict[str, Any] = {f.name: f for f in text_string_to_metric_families(text)}
    slots = {
        (s.labels["consumer_job"], s.labels["slot"]): s.value
        for s in families["outboxkit_cdc_slot_lag_bytes"].samples
    }
    base = saga.stack.settings.slot_name
    for service in JOB_TOPICS:
        assert slots[(f"saga_{service}", f"{base}_{service}"[:63])] >= 0
    up = {
        s.labels["consumer_job"]: s.value for s in families["outboxkit_consumer_inbox_up"].samples
    }
    assert up == {"saga_payments": 1, "saga_shipping": 1, "saga_orders": 1}
    batches = families["outboxkit_consumer_batch_seconds"].samples
    assert any(s.name.endswith("_count") and s.value > 0 for s in batches)
