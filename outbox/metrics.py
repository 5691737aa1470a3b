"""Prometheus metrics of the scheduled messages' releaser: how late each message was released,
how many per type, and at scrape time what is pending and due (needs prometheus-client, which
the ``service`` and ``spark`` extras install)."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy.engine import Engine

from outbox import scheduled

log = logging.getLogger(__name__)

# From a poll's fraction of a second to an outage's minutes.
LAG_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0)


class PendingCollector(Collector):
    """Read at scrape time, per database (``engines`` by a name, the ``database`` label):
    scheduled messages pending, due, and the oldest due one's age."""

    def __init__(self, engines: Mapping[str, Engine]) -> None:
        self.engines = dict(engines)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        labels = ["database"]
        pending = GaugeMetricFamily(
            "outboxkit_scheduled_pending", "scheduled messages not yet released", labels=labels
        )
        due = GaugeMetricFamily(
            "outboxkit_scheduled_due", "scheduled messages due and not yet released", labels=labels
        )
        oldest = GaugeMetricFamily(
            "outboxkit_scheduled_oldest_due_seconds",
            "how long the oldest due message has waited past its time (0: none due)",
            labels=labels,
        )
        for name, engine in self.engines.items():
            try:
                now = scheduled.pending(engine)
            except Exception as exc:
                log.warning("scheduled-message metrics of %s: %s", name, str(exc).splitlines()[0])
                continue
            pending.add_metric([name], now["pending"])
            due.add_metric([name], now["due"])
            oldest.add_metric([name], now["oldest_due_seconds"])
        yield from (pending, due, oldest)


class ReleaseMetrics:
    """The releasers' metrics in ``registry`` (one for all the releasers of a process, each
    database read at scrape time); ``released`` is their ``on_release``."""

    def __init__(self, registry: CollectorRegistry, engines: Mapping[str, Engine]) -> None:
        self.lag = Histogram(
            "outboxkit_scheduled_release_lag_seconds",
            "seconds from a scheduled message's time to its release into the outbox",
            buckets=LAG_BUCKETS,
            registry=registry,
        )
        self.count = Counter(
            "outboxkit_scheduled_released",
            "scheduled messages released into the outbox",
            ["aggregate_type", "event_type"],
            registry=registry,
        )
        registry.register(PendingCollector(engines))

    def released(self, done: scheduled.Released) -> None:
        """Record one release pass (a releaser's ``on_release``)."""
        for lag in done.lags:
            self.lag.observe(lag)
        for (aggregate_type, event_type), n in done.by_type.items():
            self.count.labels(aggregate_type, event_type).inc(n)
