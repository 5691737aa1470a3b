"""The consumer driver's metric families, from given inbox rows, batch results and progress."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from cdc.preflight import SlotLag
from inbox import BatchHandler
from spark_consumers.clock import HandlerClock
from spark_consumers.job import Job
from spark_consumers.metrics import DriverMetrics
from spark_consumers.metrics.batches import BatchDurations, BatchMetrics
from spark_consumers.metrics.tables import JobSlot, PartitionState, inbox_families
from spark_consumers.summary import SliceSummary


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of ``registry`` as exposed over HTTP, parsed back."""
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def key(topic: str, partition: int, **more: str) -> tuple[tuple[str, str], ...]:
    labels = {
        "consumer_job": "saga_payments",
        "consumer": "payments",
        "topic": topic,
        "partition": str(partition),
        **more,
    }
    return tuple(sorted(labels.items()))


class Fixed(Collector):
    def __init__(self, families: list[Any]) -> None:
        self.families = families

    def collect(self) -> Any:
        return iter(self.families)


def exposed(*families: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry()
    registry.register(Fixed(list(families)))
    return samples(registry)


def state(partition: int, watermark: int | None, bounds: tuple[int, int] | None, **kw: Any):
    return PartitionState("saga_payments", "payments", "t", partition, watermark, bounds, **kw)


def test_lag_counts_from_the_offset_after_the_watermark() -> None:
    assert state(0, 9, (0, 10)).lag == 0
    assert state(0, 9, (0, 11)).lag == 1  # e.g. a transaction's commit marker
    assert state(0, 4, (0, 10)).lag == 5


def test_lag_without_a_watermark_is_everything_kafka_holds() -> None:
    assert state(0, None, (3, 10)).lag == 7
    assert state(0, None, (0, 0)).lag == 0


def test_no_lag_when_kafka_did_not_answer() -> None:
    assert state(0, 9, None).lag is None


def test_inbox_families_show_each_partition_as_the_tables_say() -> None:
    got = exposed(
        *inbox_families(
            [
                state(0, 41, (0, 43), parked=2, skipped=1, applied=38),
                state(1, None, (0, 5), applied=0),
            ],
            [JobSlot("saga_payments", SlotLag("outboxkit_outbox_payments", True, 4096))],
            {"saga_payments": True, "saga_orders": False},
        )
    )
    assert got[("outboxkit_consumer_watermark", key("t", 0))] == 41
    assert got[("outboxkit_consumer_end_offset", key("t", 0))] == 43
    assert got[("outboxkit_consumer_lag", key("t", 0))] == 1
    assert got[("outboxkit_consumer_parked", key("t", 0))] == 2
    assert got[("outboxkit_consumer_operator_skipped", key("t", 0))] == 1
    assert got[("outboxkit_consumer_ledger_applied_total", key("t", 0))] == 38
    assert ("outboxkit_consumer_watermark", key("t", 1)) not in got  # nothing applied yet
    assert got[("outboxkit_consumer_lag", key("t", 1))] == 5
    slot = (("consumer_job", "saga_payments"), ("slot", "outboxkit_outbox_payments"))
    assert got[("outboxkit_cdc_slot_lag_bytes", slot)] == 4096
    assert got[("outboxkit_cdc_slot_active", slot)] == 1
    assert got[("outboxkit_consumer_inbox_up", (("consumer_job", "saga_orders"),))] == 0


def test_without_a_ledger_or_kafka_those_series_are_left_out() -> None:
    got = exposed(*inbox_families([state(0, 7, None)], [], {}))
    names = {name for name, _ in got}
    assert "outboxkit_consumer_ledger_applied_total" not in names
    assert "outboxkit_consumer_lag" not in names
    assert got[("outboxkit_consumer_watermark", key("t", 0))] == 7


def job(name: str = "saga_payments", consumer: str = "payments") -> Job:
    return Job(name, ("t",), consumer, lambda e, u: None, "postgresql://h/db", "k:9092")


def row(partition: int, **counts: int) -> SliceSummary:
    fields = ("applied", "skipped", "parked", "published", "retries", "resent")
    return SliceSummary.from_row(
        {
            "job": "saga_payments",
            "topic": "t",
            "partition": partition,
            "watermark": 0,
            **dict.fromkeys(fields, 0),
            "seconds": 0.2,
            "handler_seconds": 0.05,
            **counts,
        }
    )


def test_batch_results_add_up_per_partition() -> None:
    registry = CollectorRegistry()
    metrics = BatchMetrics([job()], registry)
    metrics("saga_payments", 1, [row(0, applied=3, skipped=4, resent=1, parked=1, published=3)])
    metrics("saga_payments", 2, [row(0, applied=2), row(1, applied=5, retries=1)])
    got = samples(registry)
    assert got[("outboxkit_consumer_applied_total", key("t", 0))] == 5
    assert got[("outboxkit_consumer_applied_total", key("t", 1))] == 5
    assert got[("outboxkit_consumer_skipped_total", key("t", 0, reason="replay"))] == 3
    assert got[("outboxkit_consumer_skipped_total", key("t", 0, reason="resend"))] == 1
    assert got[("outboxkit_consumer_parked_records_total", key("t", 0))] == 1
    assert got[("outboxkit_consumer_published_total", key("t", 0))] == 3
    assert got[("outboxkit_consumer_retries_total", key("t", 1))] == 1
    assert got[("outboxkit_consumer_slice_seconds_count", key("t", 0))] == 2
    assert got[("outboxkit_consumer_slice_seconds_sum", key("t", 0))] == pytest.approx(0.4)
    assert got[("outboxkit_consumer_handler_seconds_sum", key("t", 0))] == pytest.approx(0.1)


def progress(rows: int, millis: int | None) -> Any:
    durations = {} if millis is None else {"triggerExecution": millis, "addBatch": 1}
    return SimpleNamespace(
        progress=SimpleNamespace(name="q", id="x", numInputRows=rows, durationMs=durations)
    )


def test_batch_durations_count_batches_that_read_records() -> None:
    registry = CollectorRegistry()
    listener = BatchDurations(registry)
    listener.onQueryProgress(progress(5, 1500))
    listener.onQueryProgress(progress(0, 20))  # an empty trigger
    listener.onQueryProgress(progress(3, None))
    got = samples(registry)
    assert got[("outboxkit_consumer_batch_seconds_count", (("query", "q"),))] == 1
    assert got[("outboxkit_consumer_batch_seconds_sum", (("query", "q"),))] == 1.5


def test_handler_clock_times_every_run_failed_ones_included() -> None:
    seen: list[Any] = []

    def apply(events: Any, uow: Any) -> None:
        seen.append(list(events))
        if len(seen) == 2:
            raise RuntimeError("handler failed")

    clock = HandlerClock()
    timed = clock.around(BatchHandler(apply, frozenset({"A"})))
    assert timed.event_types == frozenset({"A"})
    timed.apply(["e1"], None)  # type: ignore[list-item,arg-type]
    with pytest.raises(RuntimeError):
        timed.apply(["e2"], None)  # type: ignore[list-item,arg-type]
    assert seen == [["e1"], ["e2"]]
    assert clock.seconds >= 0


def test_driver_metrics_connect_nothing_until_scraped() -> None:
    metrics = DriverMetrics([job()])
    assert metrics.tables._engines == {} and metrics.tables._offsets == {}
    metrics.close()


def test_offsets_are_not_asked_again_for_a_while_once_kafka_did_not_answer():
    """With the broker down, one scrape waits the timeout once, not once per partition."""
    from outboxkit.kernel.kafka.offsets import PartitionOffsets
    from outboxkit_workshop.devstack.processes import free_port

    offsets = PartitionOffsets(f"127.0.0.1:{free_port()}", timeout=0.5)
    try:
        assert offsets.bounds("t", 0) is None  # asked Kafka: no broker answered
        client, asked = offsets._client(), []
        offsets._client = lambda: asked.append(1) or client  # type: ignore[method-assign]
        assert [offsets.bounds("t", p) for p in range(1, 8)] == [None] * 7
        assert offsets.partitions("t") == []
        assert asked == []  # none of them asked Kafka again
    finally:
        offsets.close()


def test_a_slice_summary_goes_through_arrow_and_a_spark_row_unchanged() -> None:
    from spark_consumers.summary import ARROW_SCHEMA, SPARK_SCHEMA, to_arrow

    sent = [row(0, applied=3, skipped=4, resent=1), row(3, parked=2, retries=1)]
    batch = to_arrow(sent)
    assert batch.schema == ARROW_SCHEMA and batch.num_rows == 2
    assert [SliceSummary.from_row(r) for r in batch.to_pylist()] == sent
    assert to_arrow([]).num_rows == 0
    assert SPARK_SCHEMA.startswith("job string, topic string, partition long, watermark long")
    assert len(SPARK_SCHEMA.split(", ")) == len(ARROW_SCHEMA)
