"""Prometheus metrics of the consumer driver, per job and Kafka partition, served over HTTP.

``tables``: what the inbox tables, Kafka and the replication slots say at scrape time (exact);
``batches``: what the micro-batches reported to the driver since it started."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server

from spark_consumers.job import Job
from spark_consumers.metrics.batches import BatchDurations, BatchMetrics
from spark_consumers.metrics.tables import InboxTablesCollector


@dataclass
class DriverMetrics:
    """The driver's registry: ``on_batch`` and ``listener`` feed it, ``serve`` exposes it."""

    jobs: Sequence[Job]
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    _server: Any = None

    def __post_init__(self) -> None:
        self.on_batch = BatchMetrics(self.jobs, self.registry)
        self.listener = BatchDurations(self.registry)
        self.tables = InboxTablesCollector(self.jobs)
        self.registry.register(self.tables)

    def serve(self, host: str, port: int) -> int:
        """Serve /metrics on ``host:port`` (0: a free port) from a daemon thread; the port."""
        self._server, _ = start_http_server(port, host, registry=self.registry)
        return int(self._server.server_address[1])

    def close(self) -> None:
        """Stop serving; close the Kafka clients and engines the scrapes made."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        self.tables.close()
