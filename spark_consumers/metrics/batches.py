"""The driver's metrics from what the micro-batches reported (since the driver started): records
applied, skipped and parked per partition, a slice's time and its handlers' share, and Spark's
duration of each micro-batch."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from pyspark.sql.streaming.listener import StreamingQueryListener

from spark_consumers.job import Job
from spark_consumers.metrics.tables import LABELS
from spark_consumers.summary import SliceSummary

SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class BatchMetrics:
    """Counts and times each partition's result row; call it as the runner's ``on_batch``."""

    def __init__(self, jobs: Sequence[Job], registry: CollectorRegistry) -> None:
        self.consumers = {job.name: job.consumer for job in jobs}

        def counter(name: str, text: str, *extra: str) -> Counter:
            return Counter(f"outboxkit_consumer_{name}", text, [*LABELS, *extra], registry=registry)

        def histogram(name: str, text: str) -> Histogram:
            return Histogram(
                f"outboxkit_consumer_{name}", text, LABELS, buckets=SECONDS, registry=registry
            )

        self.applied = counter("applied", "records applied by the micro-batches")
        self.skipped = counter(
            "skipped", "records skipped: replay (at or below the watermark) or resend", "reason"
        )
        self.parked = counter("parked_records", "records the micro-batches parked or held")
        self.published = counter("published", "events the handlers published")
        self.retries = counter("retries", "slices retried while the database was unreachable")
        self.slice_seconds = histogram(
            "slice_seconds", "time applying one partition's slice of a micro-batch"
        )
        self.handler_seconds = histogram(
            "handler_seconds", "time in the handlers while applying one partition's slice"
        )

    def __call__(self, job_name: str, batch_id: int, rows: Sequence[SliceSummary]) -> None:
        for row in rows:
            key = [job_name, self.consumers.get(job_name, ""), row.topic, str(row.partition)]
            self.applied.labels(*key).inc(row.applied)
            self.skipped.labels(*key, "replay").inc(row.skipped - row.resent)
            self.skipped.labels(*key, "resend").inc(row.resent)
            self.parked.labels(*key).inc(row.parked)
            self.published.labels(*key).inc(row.published)
            self.retries.labels(*key).inc(row.retries)
            self.slice_seconds.labels(*key).observe(row.seconds)
            self.handler_seconds.labels(*key).observe(row.handler_seconds)


class BatchDurations(StreamingQueryListener):
    """Spark's duration of each micro-batch that read records, per streaming query."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.seconds = Histogram(
            "outboxkit_consumer_batch_seconds",
            "a micro-batch's whole time (Spark's triggerExecution), per query",
            ["query"],
            buckets=SECONDS,
            registry=registry,
        )

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        millis = (progress.durationMs or {}).get("triggerExecution")
        if progress.numInputRows and millis is not None:
            self.seconds.labels(progress.name or str(progress.id)).observe(millis / 1000)

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass
