"""The console's overview: per consumer job its partitions, lag in records and seconds, rate,
parked and retrying records and stopped partitions; per connector its state, tasks and slot;
per database its outbox and scheduled messages. Read when someone looks, at most once every
``fresh`` seconds however many look; a component that does not answer is a line on the page,
never an error page."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy.engine import Engine

from outboxkit.console import reads
from outboxkit.console.shapes import Sample, Samples
from outboxkit.kernel.kafka.offsets import PartitionOffsets
from outboxkit.kernel.quiet import QUIET_SECONDS, Quiet

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PartitionView:
    """One partition: watermark, Kafka's end, lag in records and in seconds, why stopped."""

    topic: str
    partition: int
    watermark: int
    end: int | None
    lag: int | None
    waited: float | None  # seconds the oldest record not applied has waited
    stopped: str | None


@dataclass(frozen=True)
class ConsumerView:
    """One consumer job at one look."""

    job: str
    consumer: str
    partitions: list[PartitionView]
    parked: int
    retrying: int
    rate: float | None
    samples: Samples | None = None
    problem: str | None = None

    @property
    def lag(self) -> int | None:
        """Records not applied yet, over every partition (None: Kafka did not answer)."""
        lags = [p.lag for p in self.partitions]
        return None if any(lag is None for lag in lags) else sum(lag or 0 for lag in lags)

    @property
    def waited(self) -> float | None:
        """The longest any record not applied has waited, in seconds."""
        return max((p.waited for p in self.partitions if p.waited is not None), default=None)

    @property
    def stopped(self) -> list[PartitionView]:
        """Partitions stopped because their offsets moved."""
        return [p for p in self.partitions if p.stopped]


@dataclass(frozen=True)
class ConnectorView:
    """One connector: its state, its tasks' states, its slot and how far it is behind."""

    name: str
    state: str
    tasks: list[tuple[int, str, str | None]]
    failure: str | None
    slot: dict[str, Any] | None


@dataclass(frozen=True)
class DatabaseView:
    """One database's outbox side."""

    name: str
    rows: reads.DatabaseRows | None
    problem: str | None = None


@dataclass(frozen=True)
class Overview:
    """Everything the overview page shows, read at ``read_at``."""

    consumers: list[ConsumerView]
    connectors: list[ConnectorView]
    databases: list[DatabaseView]
    problems: list[str] = field(default_factory=list)
    read_at: float = 0.0


@dataclass
class Watched:
    """A consumer job the console watches: its name, consumer, topics, database and Kafka."""

    name: str
    consumer: str
    topics: Sequence[str]
    engine: Engine
    kafka: dict[str, str]


class Heads:
    """When the first record not applied of each partition was written (Kafka's timestamp):
    one consumer per cluster, assigned those offsets for one read, then unassigned."""

    def __init__(self, kafka: dict[str, str], budget: float = 0.5) -> None:
        self.config = {
            **kafka,
            "group.id": "outboxkit-console",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "fetch.max.bytes": 1048576,
            # A partition with nothing left answers at once: its end is told (EOF), and a fetch
            # waits 10 ms on the broker for data, not the default 500.
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 10,
        }
        self.budget = budget
        self._consumer: Any = None
        self._lock = threading.Lock()

    def times(self, offsets: Sequence[tuple[str, int, int]]) -> dict[tuple[str, int], float | None]:
        """(topic, partition) -> the timestamp (seconds) of its first committed record at or
        after the given offset; None where the partition ends first (what is left is a
        transaction's commit marker, or an aborted transaction's records: nothing to apply).
        Partitions that answer neither within the budget are left out."""
        if not offsets:
            return {}
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        found: dict[tuple[str, int], float | None] = {}
        with self._lock:
            if self._consumer is None:
                self._consumer = Consumer(self.config)
            consumer = self._consumer
            consumer.assign([TopicPartition(t, p, o) for t, p, o in offsets])
            try:
                deadline = time.monotonic() + self.budget
                while len(found) < len(offsets) and time.monotonic() < deadline:
                    message = consumer.poll(max(deadline - time.monotonic(), 0.01))
                    if message is None:
                        continue
                    where = (message.topic(), message.partition())
                    error = message.error()
                    if where in found or (
                        error is not None and error.code() != KafkaError._PARTITION_EOF
                    ):
                        continue
                    found[where] = None if error is not None else message.timestamp()[1] / 1000
            finally:
                consumer.unassign()
        return found

    def close(self) -> None:
        """Close the consumer, if one was made."""
        with self._lock:
            if self._consumer is not None:
                self._consumer.close()
                self._consumer = None


class OverviewReader:
    """Reads the overview of ``watched`` jobs, the connectors ``connect`` lists and the
    ``databases`` (name -> engine) when someone looks; at most once per ``fresh`` seconds, in
    the background: a look at an overview older than that gets it at once and starts one read
    for the next look, so no page waits on Kafka, Connect or a database but the very first
    (``fresh`` 0: every look reads, and waits)."""

    def __init__(
        self,
        watched: Sequence[Watched],
        databases: dict[str, Engine],
        connect: Callable[[], Any] | None,
        *,
        fresh: float = 2.0,
    ) -> None:
        self.watched = list(watched)
        self.databases = databases
        self.connect = connect
        self.fresh = fresh
        self.samples = {w.consumer: Samples() for w in self.watched}
        self._offsets: dict[str, PartitionOffsets] = {}
        self._heads: dict[str, Heads] = {}
        self._lock = threading.Lock()
        self._last: Overview | None = None
        self._refreshing = False  # a background read is under way
        self._connect_quiet = Quiet()  # after Connect failed to answer

    def read(self) -> Overview:
        """The last overview read; one read in the background when it is ``fresh`` seconds
        old (the first look, and every look when ``fresh`` is 0, reads and waits)."""
        with self._lock:
            last = self._last
            if last is None or self.fresh <= 0:
                self._last = self._read(time.time())
                return self._last
            if time.time() - last.read_at >= self.fresh and not self._refreshing:
                self._refreshing = True
                threading.Thread(target=self._refresh, name="console-overview", daemon=True).start()
            return last

    def _refresh(self) -> None:
        try:
            read = self._read(time.time())
        except Exception:  # each part says its own failure; this is a bug, logged
            log.exception("the console's overview could not be read")
            read = None
        with self._lock:
            if read is not None:
                self._last = read
            self._refreshing = False

    def partition(self, consumer: str, topic: str, partition: int) -> PartitionView | None:
        """A partition as the last overview shows it, with its watermark and stop read again
        from the inbox now (an operator just resumed or stopped it); None when the console
        watches no such partition."""
        views = (p for c in self.read().consumers if c.consumer == consumer for p in c.partitions)
        view = next((p for p in views if (p.topic, p.partition) == (topic, partition)), None)
        engine = next((w.engine for w in self.watched if w.consumer == consumer), None)
        if engine is None:
            return view
        with engine.connect() as conn:
            rows = reads.consumer_rows(conn, consumer).partitions
        row = next((r for r in rows if (r.topic, r.partition) == (topic, partition)), None)
        if row is None:
            return None
        if view is None:  # new since the last overview: nothing of Kafka known yet
            return PartitionView(topic, partition, row.watermark, None, None, None, row.stopped)
        return replace(view, watermark=row.watermark, stopped=row.stopped)

    def _read(self, now: float) -> Overview:
        problems: list[str] = []
        consumers = [self._consumer(w, now) for w in self.watched]
        for bootstrap, offsets in self._offsets.items():
            if offsets.failure is not None:
                problems.append(
                    f"Kafka at {bootstrap} did not answer ({offsets.failure}): lag unknown; "
                    f"the console asks again within {QUIET_SECONDS:.0f} s"
                )
        databases = [self._database(name, engine) for name, engine in self.databases.items()]
        slots = {s["slot_name"]: s for d in databases if d.rows for s in d.rows.slots}
        connectors = self._connectors(slots, problems)
        return Overview(consumers, connectors, databases, problems, now)

    def _consumer(self, watched: Watched, now: float) -> ConsumerView:
        try:
            with watched.engine.connect() as conn:
                rows = reads.consumer_rows(conn, watched.consumer)
        except Exception as exc:  # the page says so; the other jobs still show
            return ConsumerView(watched.name, watched.consumer, [], 0, 0, None, problem=_said(exc))
        offsets = self._offsets_of(watched)
        bounds = {
            (p.topic, p.partition): offsets.bounds(p.topic, p.partition) for p in rows.partitions
        }
        # From the first offset not applied, or the first Kafka still has when retention
        # deleted the ones before it (asked for a deleted offset, a consumer would jump to the
        # end and find none waiting).
        behind = [
            (p.topic, p.partition, max(p.watermark + 1, b[0]))
            for p in rows.partitions
            if (b := bounds[(p.topic, p.partition)]) is not None
            and b[1] > max(p.watermark + 1, b[0])
        ]
        times = self._heads_of(watched).times(behind) if behind else {}
        partitions = [
            _partition(p, bounds[(p.topic, p.partition)], times, now) for p in rows.partitions
        ]
        samples = self.samples[watched.consumer]
        lags = [p.lag for p in partitions]
        lag = None if any(x is None for x in lags) else sum(x or 0 for x in lags)
        samples.add(Sample(now, sum(max(p.watermark, 0) for p in rows.partitions), lag))
        return ConsumerView(
            watched.name,
            watched.consumer,
            partitions,
            rows.parked,
            rows.retrying,
            samples.rate(),
            samples,
        )

    def _offsets_of(self, watched: Watched) -> PartitionOffsets:
        bootstrap = watched.kafka["bootstrap.servers"]
        if bootstrap not in self._offsets:
            options = {k: v for k, v in watched.kafka.items() if k != "bootstrap.servers"}
            self._offsets[bootstrap] = PartitionOffsets(bootstrap, options=options, timeout=1.0)
        return self._offsets[bootstrap]

    def _heads_of(self, watched: Watched) -> Heads:
        bootstrap = watched.kafka["bootstrap.servers"]
        if bootstrap not in self._heads:
            self._heads[bootstrap] = Heads(watched.kafka)
        return self._heads[bootstrap]

    def _connectors(
        self, slots: dict[str, dict[str, Any]], problems: list[str]
    ) -> list[ConnectorView]:
        """Each connector with its tasks and its slot (of ``slots``, by the config's name)."""
        if self.connect is None:
            return []
        silence = self._connect_quiet.silence()
        if silence is not None:
            problems.append(f"{silence.why}; the console asks again within {QUIET_SECONDS:.0f} s")
            return []
        try:
            client = self.connect()
            views = []
            for name in client.connectors():
                status = client.status(name)
                config = client.get_config(name) or {}
                slot = slots.get(config.get("slot.name", ""))
                if status is None:
                    continue
                tasks = [(t, state, status.worker_of(t)) for t, state, _ in status.tasks]
                failure = (status.failure or "").splitlines()[:3]
                views.append(ConnectorView(name, status.state, tasks, "\n".join(failure), slot))
            self._connect_quiet.answered()
            return views
        except Exception as exc:
            said = f"Kafka Connect did not answer: {_said(exc)}"
            self._connect_quiet.failed(said)  # not asked again for a while
            problems.append(said)
            return []

    def _database(self, name: str, engine: Engine) -> DatabaseView:
        try:
            with engine.connect() as conn:
                return DatabaseView(name, reads.database_rows(conn))
        except Exception as exc:
            return DatabaseView(name, None, _said(exc))

    def close(self) -> None:
        """Close the Kafka clients."""
        for offsets in self._offsets.values():
            offsets.close()
        for heads in self._heads.values():
            heads.close()


def _partition(
    row: reads.PartitionRow,
    bounds: tuple[int, int] | None,
    heads: dict[tuple[str, int], float | None],
    now: float,
) -> PartitionView:
    """A partition's view: lag in records from Kafka's end offset (0 when nothing committed
    is left past the watermark: a transaction's commit marker takes an offset too), and how long
    its first record not applied has waited."""
    if bounds is None:
        return PartitionView(row.topic, row.partition, row.watermark, None, None, None, row.stopped)
    first, end = bounds
    lag = max(0, end - max(row.watermark + 1, first))
    where = (row.topic, row.partition)
    head = heads.get(where)
    if lag and where in heads and head is None:  # only markers (or aborted records) left
        lag = 0
    waited = 0.0 if lag == 0 else (None if head is None else max(now - head, 0.0))
    return PartitionView(row.topic, row.partition, row.watermark, end, lag, waited, row.stopped)


def _said(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]
