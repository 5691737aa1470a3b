"""Prometheus metrics of a service: requests, outbox events written, inbox lag and parked."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy.engine import Engine

from inbox.lag import read_lags
from inbox.operations import parked_counts
from outbox.metrics import ReleaseMetrics
from outboxkit.kernel.envelope import Envelope
from outboxkit.kernel.kafka.offsets import PartitionOffsets
from outboxkit.kernel.kafka.security import PLAINTEXT, KafkaSecurity

log = logging.getLogger(__name__)


class InboxCollector(Collector):
    """Read at scrape time: watermark, lag, parked count and records waiting to retry per
    consumer. Lag needs Kafka (the partition's end offset) and follows the one rule of
    `inbox.lag.PartitionLag`."""

    def __init__(
        self,
        engine: Engine,
        consumers: list[str],
        bootstrap: str | None,
        kafka_security: KafkaSecurity = PLAINTEXT,
    ) -> None:
        self.engine, self.consumers = engine, consumers
        self.offsets = PartitionOffsets(bootstrap, kafka_security) if bootstrap else None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        labels = ["consumer", "topic", "partition"]
        mark = GaugeMetricFamily(
            "outboxkit_inbox_watermark", "highest applied offset", labels=labels
        )
        lag = GaugeMetricFamily("outboxkit_inbox_lag", "records not yet applied", labels=labels)
        held = GaugeMetricFamily(
            "outboxkit_inbox_parked", "records parked for redrive", labels=["consumer"]
        )
        later = GaugeMetricFamily(
            "outboxkit_inbox_retrying",
            "parked records waiting for a delayed retry",
            labels=["consumer"],
        )
        try:
            with self.engine.connect() as conn:
                lags = read_lags(conn, self.consumers, self.offsets)
                waiting = parked_counts(conn, self.consumers)
                retrying = parked_counts(conn, self.consumers, retrying=True)
        except Exception as exc:
            log.warning("inbox metrics unavailable: %s", exc)
            return
        for each in lags:
            key = [each.consumer, each.topic, str(each.partition)]
            if each.watermark is not None:
                mark.add_metric(key, each.watermark)
            if each.lag is not None:
                lag.add_metric(key, each.lag)
        for consumer in self.consumers or waiting:
            held.add_metric([consumer], waiting.get(consumer, 0))
            later.add_metric([consumer], retrying.get(consumer, 0))
        yield from (mark, lag, held, later)


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
        self.release = ReleaseMetrics(self.registry, {engine.url.database or "service": engine})

    def published(self, events: Iterable[Envelope]) -> None:
        """Count events whose transaction committed (a `PublishedObserver`)."""
        for event in events:
            self.outbox.labels(event.aggregate_type, event.event_type).inc()
