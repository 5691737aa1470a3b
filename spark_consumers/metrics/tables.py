"""The driver's metrics read at scrape time from the inbox tables, Kafka and the replication
slots: exact, whatever ran before the driver started."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy.engine import Connection, Engine

from cdc.preflight import SlotLag, database_slots
from inbox.lag import PartitionLag, read_lags
from inbox.operations import partition_counts, stopped_partitions
from inbox.tables import ledger, parked, skipped
from outboxkit.kernel.kafka.offsets import PartitionOffsets
from spark_consumers.job import Job
from spark_consumers.runner import source_key

log = logging.getLogger(__name__)

# ``consumer_job`` names the job: Prometheus keeps ``job`` for the scrape target.
LABELS = ["consumer_job", "consumer", "topic", "partition"]


@dataclass(frozen=True)
class PartitionState:
    """One partition a job reads, as its inbox tables and Kafka show it at one scrape."""

    consumer_job: str
    consumer: str
    topic: str
    partition: int
    watermark: int | None  # None: nothing applied (nor skipped past) yet
    bounds: tuple[int, int] | None  # Kafka's (first, end) offsets; None: Kafka did not answer
    parked: int = 0
    skipped: int = 0  # by an operator (`outboxkit inbox skip`)
    applied: int | None = None  # events in the ledger; None: the job keeps no ledger
    stopped: bool = False  # its offsets moved: neither applied nor skipped (`inbox.moves`)

    @property
    def labels(self) -> list[str]:
        return [self.consumer_job, self.consumer, self.topic, str(self.partition)]

    @property
    def lag(self) -> int | None:
        """Offsets not yet applied, by the one rule of `inbox.lag.PartitionLag`."""
        return PartitionLag(
            self.consumer, self.topic, self.partition, self.watermark, self.bounds
        ).lag


@dataclass(frozen=True)
class JobSlot:
    """A logical replication slot of a job's database."""

    consumer_job: str
    slot: SlotLag


def inbox_families(
    states: Iterable[PartitionState], slots: Iterable[JobSlot], readable: Mapping[str, bool]
) -> list[Metric]:
    """The scrape-time metric families from the inbox tables, Kafka and the slots."""
    gauge = {
        name: GaugeMetricFamily(f"outboxkit_consumer_{name}", text, labels=LABELS)
        for name, text in (
            ("watermark", "highest offset applied or skipped past (inbox_watermark)"),
            ("end_offset", "the partition's end offset in Kafka"),
            ("lag", "offsets not yet applied: end offset minus the watermark's next offset"),
            ("parked", "records parked for redrive (inbox_parked)"),
            ("operator_skipped", "parked records an operator skipped (inbox_skipped)"),
            (
                "stopped",
                "1 when the partition is stopped because its offsets changed meaning "
                "(re-created topic, another cluster): `outboxkit inbox status` says why",
            ),
        )
    }
    applied = CounterMetricFamily(
        "outboxkit_consumer_ledger_applied", "events applied (inbox_ledger rows)", labels=LABELS
    )
    for state in states:
        key = state.labels
        if state.watermark is not None:
            gauge["watermark"].add_metric(key, state.watermark)
        if state.bounds is not None:
            gauge["end_offset"].add_metric(key, state.bounds[1])
        if state.lag is not None:
            gauge["lag"].add_metric(key, state.lag)
        gauge["parked"].add_metric(key, state.parked)
        gauge["operator_skipped"].add_metric(key, state.skipped)
        gauge["stopped"].add_metric(key, 1 if state.stopped else 0)
        if state.applied is not None:
            applied.add_metric(key, state.applied)
    up = GaugeMetricFamily(
        "outboxkit_consumer_inbox_up",
        "1 when the job's inbox tables could be read at this scrape",
        labels=["consumer_job"],
    )
    for name, ok in readable.items():
        up.add_metric([name], 1 if ok else 0)
    return [*gauge.values(), applied, up, *slot_families(slots)]


def slot_families(slots: Iterable[JobSlot]) -> list[Metric]:
    """Lag and activity of the replication slots of each job's database."""
    labels = ["consumer_job", "slot"]
    lag = GaugeMetricFamily(
        "outboxkit_cdc_slot_lag_bytes",
        "WAL bytes between the current position and the slot's confirmed flush position",
        labels=labels,
    )
    active = GaugeMetricFamily(
        "outboxkit_cdc_slot_active", "1 while a connector streams from the slot", labels=labels
    )
    for each in slots:
        key = [each.consumer_job, each.slot.slot_name]
        if each.slot.lag_bytes is not None:
            lag.add_metric(key, each.slot.lag_bytes)
        active.add_metric(key, 1 if each.slot.active else 0)
    return [lag, active]


def read_job(conn: Connection, job: Job, offsets: PartitionOffsets) -> list[PartitionState]:
    """The state of every partition ``job`` reads: those Kafka has and those the inbox knows."""
    waiting = partition_counts(conn, parked, job.consumer)
    dropped = partition_counts(conn, skipped, job.consumer)
    applied = partition_counts(conn, ledger, job.consumer) if job.ledger else None
    stopped = stopped_partitions(conn, job.consumer)
    return [
        PartitionState(
            job.name,
            job.consumer,
            each.topic,
            each.partition,
            each.watermark,
            each.bounds,
            waiting.get((each.topic, each.partition), 0),
            dropped.get((each.topic, each.partition), 0),
            None if applied is None else applied.get((each.topic, each.partition), 0),
            (each.topic, each.partition) in stopped,
        )
        for each in read_lags(conn, [job.consumer], offsets, job.topics)
        if each.topic in job.topics
    ]


class InboxTablesCollector(Collector):
    """Reads every job's inbox tables, its topics' offsets and its database's slots at scrape
    time; a database or broker that does not answer leaves its series out, never fails it."""

    def __init__(self, jobs: Sequence[Job]) -> None:
        self.jobs = tuple(jobs)
        self._engines: dict[str, Engine] = {}
        self._offsets: dict[tuple[Any, ...], PartitionOffsets] = {}
        # One scrape reads at a time: the clients and engines are made once, and scrapes that
        # overlap (a slow database) queue here instead of each opening connections.
        self._lock = threading.Lock()

    def _engine(self, job: Job) -> Engine:
        key = f"{job.database_url} {job.database_password_file}"
        if key not in self._engines:
            self._engines[key] = job.engine("metrics")
        return self._engines[key]

    def _offsets_of(self, job: Job) -> PartitionOffsets:
        key = source_key(job)
        if key not in self._offsets:
            self._offsets[key] = PartitionOffsets(
                job.bootstrap_servers, job.kafka_security, job.kafka_options
            )
        return self._offsets[key]

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            families = list(self._collect())
        yield from families

    def _collect(self) -> Iterator[Metric]:
        states: list[PartitionState] = []
        slots: list[JobSlot] = []
        readable: dict[str, bool] = {}
        for job in self.jobs:
            try:
                with self._engine(job).connect() as conn:
                    states.extend(read_job(conn, job, self._offsets_of(job)))
                    slots.extend(JobSlot(job.name, s) for s in database_slots(conn))
                readable[job.name] = True
            except Exception as exc:  # the database down: this job's series are left out
                log.warning("inbox metrics of %s unavailable: %s", job.name, exc)
                readable[job.name] = False
        yield from inbox_families(states, slots, readable)

    def close(self) -> None:
        """Close the Kafka clients and database engines it made."""
        for offsets in self._offsets.values():
            offsets.close()
        for engine in self._engines.values():
            engine.dispose()
