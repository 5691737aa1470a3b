"""Prometheus metrics of a service: requests, outbox events written, inbox lag and parked."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy.engine import Engine

from inbox.operations import parked_counts, watermark_rows
from kernel.envelope import Envelope
from kernel.kafka.offsets import PartitionOffsets
from kernel.kafka.security import PLAINTEXT, KafkaSecurity

log = logging.getLogger(__name__)


class InboxCollector(Collector):
    """Read at scrape time: watermark, lag (end offset minus next offset) and parked count per
    consumer. Lag needs Kafka: the partition's end offset (transaction markers count as offsets,
    so a fully applied transactional partition may show a lag of one marker)."""

    def __init__(
        self,
        engine: Engine,
        consumers: list[str],
        bootstrap: str | None,
        kafka_security: KafkaSecurity = PLAINTEXT,
    ) -> None:
        self.engine, self.consumers = engine, consumers
        self.offsets = PartitionOffsets(bootstrap, kafka_security) if bootstrap else None

    def _end_offset(self, topic: str, partition: int) -> int | None:
        bounds = self.offsets.bounds(topic, partition) if self.offsets else None
        return None if bounds is None else bounds[1]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        labels = ["consumer", "topic", "partition"]
        mark = GaugeMetricFamily(
            "outboxkit_inbox_watermark", "highest applied offset", labels=labels
        )
        lag = GaugeMetricFamily("outboxkit_inbox_lag", "records not yet applied", labels=labels)
        held = GaugeMetricFamily(
            "outboxkit_inbox_parked", "records parked for redrive", labels=["consumer"]
        )
        try:
            with self.engine.connect() as conn:
                rows = watermark_rows(conn, self.consumers)
                waiting = parked_counts(conn, self.consumers)
        except Exception as exc:
            log.warning("inbox metrics unavailable: %s", exc)
            return
        for consumer, topic, partition, offset in rows:
            key = [consumer, topic, str(partition)]
            mark.add_metric(key, offset)
            end = self._end_offset(topic, partition)
            if end is not None:
                lag.add_metric(key, max(0, end - offset - 1))
        for consumer in self.consumers or waiting:
            held.add_metric([consumer], waiting.get(consumer, 0))
        yield from (mark, lag, held)


class Metrics:
    """One registry per app (several apps can live in one process, e.g. in tests)."""

    def __init__(
        self,
        engine: Engine,
        consumers: list[str],
        bootstrap: str | None,
        kafka_security: KafkaSecurity = PLAINTEXT,
    ) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "outboxkit_http_requests",
            "HTTP requests",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "outboxkit_http_request_seconds",
            "HTTP request latency",
            ["method", "route"],
            registry=self.registry,
        )
        self.outbox = Counter(
            "outboxkit_outbox_events",
            "events written to the outbox (committed)",
            ["aggregate_type", "event_type"],
            registry=self.registry,
        )
        self.registry.register(InboxCollector(engine, consumers, bootstrap, kafka_security))

    def published(self, events: Iterable[Envelope]) -> None:
        """Count events whose transaction committed (a `PublishedObserver`)."""
        for event in events:
            self.outbox.labels(event.aggregate_type, event.event_type).inc()
