"""A Kafka source for Structured Streaming on PySpark's Python Data Source API (confluent-kafka).

Used where Spark's built-in ``kafka`` format is not on the classpath; the columns are the same.
One input partition per Kafka partition slice; offsets are ``{"topic:partition": next_offset}``.
The end of each partition is found by reading its tail: some brokers under-report the latest offset.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows
from pyspark.sql.types import StructType

SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int, headers array<struct<key: string, value: binary>>"
)
ARROW_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    ]
)
CHUNK = 10_000
STALL_SECONDS = 60.0


@dataclass(frozen=True)
class KafkaSlice(InputPartition):
    """Offsets [start, end) of one topic partition."""

    topic: str
    partition: int
    start: int
    end: int


def _key(topic: str, partition: int) -> str:
    return f"{topic}:{partition}"


def _client_config(options: dict[str, str]) -> dict[str, Any]:
    config = {k[len("kafka.") :]: v for k, v in options.items() if k.startswith("kafka.")}
    config.setdefault("bootstrap.servers", options.get("bootstrap.servers", ""))
    if not config["bootstrap.servers"]:
        raise ValueError("the outboxkit Kafka source needs option kafka.bootstrap.servers")
    return config


def _consumer(options: dict[str, str]) -> Any:
    from confluent_kafka import Consumer

    return Consumer(
        {
            **_client_config(options),
            "group.id": "outboxkit-spark-source",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 50,
        }
    )


def true_ends(consumer: Any, starts: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    """The offset after the last record of each partition, found by reading the tails.

    The reported high watermark cannot be trusted on every broker (one under-reports it as the
    base offset of the last batch + 1), so each partition is read from just before its reported
    end until the fetches come back empty. All partitions are read at once: the wait for an
    empty fetch is paid once per plan, not once per partition."""
    from confluent_kafka import TopicPartition

    ends: dict[tuple[str, int], int] = {}
    assignment = []
    for (topic, partition), start in starts.items():
        low, reported = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        ends[(topic, partition)] = max(reported, start)
        assignment.append(TopicPartition(topic, partition, max(start, reported - 1, low, 0)))
    if not assignment:
        return ends
    consumer.assign(assignment)
    idle_deadline = time.monotonic() + 0.3
    hard_deadline = time.monotonic() + 2.0  # busy partitions never idle: take what we have
    while time.monotonic() < min(idle_deadline, hard_deadline):
        messages = consumer.consume(num_messages=10_000, timeout=0.1)
        for message in messages:
            if message.error() is None:
                key = (message.topic(), message.partition())
                ends[key] = max(ends[key], message.offset() + 1)
        if messages:
            idle_deadline = time.monotonic() + 0.15
    return ends


class KafkaStreamReader(DataSourceStreamReader):
    """Plans micro-batches on the driver; reads slices on the executors."""

    def __init__(self, options: dict[str, str]) -> None:
        self.options = options
        self.topics = [t.strip() for t in options.get("subscribe", "").split(",") if t.strip()]
        if not self.topics:
            raise ValueError("the outboxkit Kafka source needs option subscribe=topic1,topic2")
        self.max_offsets = int(options.get("maxoffsetspertrigger", "200000"))
        self._driver_consumer: Any = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_driver_consumer"] = None  # never ship the driver's client to executors
        return state

    def _client(self) -> Any:
        if self._driver_consumer is None:
            self._driver_consumer = _consumer(self.options)
        return self._driver_consumer

    def _partitions(self) -> list[tuple[str, int]]:
        found = []
        metadata = self._client().list_topics(timeout=10)
        for topic in self.topics:
            meta = metadata.topics.get(topic)
            if meta is not None and meta.error is None:
                found += [(topic, p) for p in sorted(meta.partitions)]
        return found

    def _starting(self, topic: str, partition: int) -> int:
        starting = json.loads(self.options.get("startingoffsets", "{}") or "{}")
        return int(starting.get(_key(topic, partition), 0))

    def initialOffset(self) -> dict[str, int]:
        return {_key(t, p): self._starting(t, p) for t, p in self._partitions()}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_offsets)

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        budget = None if isinstance(limit, ReadAllAvailable) else getattr(limit, "max_rows", None)
        latest: dict[str, int] = {}
        begins = {
            (topic, partition): int(
                start.get(_key(topic, partition), self._starting(topic, partition))
            )
            for topic, partition in self._partitions()
        }
        found = true_ends(self._client(), begins)
        ends = {_key(t, p): (begin, found[(t, p)]) for (t, p), begin in begins.items()}
        share = None if budget is None or not ends else max(1, budget // len(ends))
        for key, (begin, end) in ends.items():
            latest[key] = end if share is None else min(end, begin + share)
        return {**start, **latest}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[KafkaSlice]:
        slices = []
        for key, stop in end.items():
            topic, _, partition = key.rpartition(":")
            begin = int(start.get(key, self._starting(topic, int(partition))))
            if stop > begin:
                slices.append(KafkaSlice(topic, int(partition), begin, int(stop)))
        return slices

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, KafkaSlice)
        yield from read_slice(self.options, partition)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to do: the inbox, not the broker or the checkpoint, records what was applied."""

    def stop(self) -> None:
        if self._driver_consumer is not None:
            self._driver_consumer.close()
            self._driver_consumer = None


def read_slice(options: dict[str, str], part: KafkaSlice) -> Iterator[pa.RecordBatch]:
    """The records of one slice as Arrow batches of up to CHUNK rows."""
    from confluent_kafka import TopicPartition

    consumer = _consumer(options)
    try:
        consumer.assign([TopicPartition(part.topic, part.partition, part.start)])
        columns: dict[str, list[Any]] = {name: [] for name in ARROW_SCHEMA.names}
        position, last_progress = part.start, time.monotonic()
        while position < part.end:
            messages = consumer.consume(num_messages=CHUNK, timeout=0.5)
            if not messages and time.monotonic() - last_progress > STALL_SECONDS:
                raise TimeoutError(
                    f"{part.topic}[{part.partition}] stalled at {position}, wanted {part.end}"
                )
            for message in messages:
                if message.error() is not None or message.offset() >= part.end:
                    continue
                _append(columns, message)
                last_progress = time.monotonic()
            # Control records (transaction markers) take offsets but are never delivered.
            position = max(
                position, consumer.position([TopicPartition(part.topic, part.partition)])[0].offset
            )
            if len(columns["offset"]) >= CHUNK:
                yield pa.RecordBatch.from_pydict(columns, schema=ARROW_SCHEMA)
                columns = {name: [] for name in ARROW_SCHEMA.names}
        if columns["offset"]:
            yield pa.RecordBatch.from_pydict(columns, schema=ARROW_SCHEMA)
    finally:
        consumer.close()


def _append(columns: dict[str, list[Any]], message: Any) -> None:
    ts_type, ts = message.timestamp()
    columns["key"].append(message.key())
    columns["value"].append(message.value())
    columns["topic"].append(message.topic())
    columns["partition"].append(message.partition())
    columns["offset"].append(message.offset())
    columns["timestamp"].append(ts * 1000 if ts and ts > 0 else None)
    columns["timestampType"].append(ts_type)
    columns["headers"].append(
        [
            {"key": k, "value": v if isinstance(v, bytes | None) else str(v).encode()}
            for k, v in (message.headers() or [])
        ]
    )


class KafkaDataSource(DataSource):
    """``spark.readStream.format("outboxkit_kafka")``."""

    @classmethod
    def name(cls) -> str:
        return "outboxkit_kafka"

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: StructType) -> KafkaStreamReader:
        return KafkaStreamReader(dict(self.options))
