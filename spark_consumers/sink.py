"""The inbox sink: each micro-batch is applied per Kafka partition, on the executors."""

from __future__ import annotations

import dataclasses
import functools
import gc
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from inbox.position import TopicIdentity
from outboxkit.kernel import tracing
from outboxkit.kernel.errors import is_transient
from outboxkit.kernel.tracing import spans
from outboxkit.kernel.tracing.context import TraceContext
from outboxkit.kernel.wire.record import KafkaRecord
from spark_consumers.clock import HandlerClock
from spark_consumers.identity import TopicIdentities
from spark_consumers.job import Job, query_name
from spark_consumers.retry import BATCH_RETRY, IDENTITY_RETRY, retrying
from spark_consumers.summary import SPARK_SCHEMA, SliceSummary, to_arrow

log = logging.getLogger(__name__)

_ENGINES: dict[str, Any] = {}
# service.name of the consumers' spans (driver and Python workers) unless OTEL_SERVICE_NAME is set.
TRACE_SERVICE = "outboxkit-consumers"


def _engine(job: Job) -> Any:
    """One engine per executor process, database and session settings, reused across
    batches."""
    key = f"{job.database_url} {job.database_password_file} {job.stalled_transaction_seconds}"
    if key not in _ENGINES:
        _ENGINES[key] = job.engine()
    return _ENGINES[key]


def records_from_arrow(batch: pa.RecordBatch) -> list[KafkaRecord]:
    """Kafka records out of an Arrow batch in the Kafka source schema, column by column.

    The headers (a list of key/value structs per record) are read as two flat columns and cut
    per record by the lists' lengths: as Python lists of dicts (``to_pylist``) they took ~60% of
    the conversion, which took 19-31% of the workers' task body in a backlog's drain."""
    columns = [
        batch.column(name).to_pylist() for name in ("topic", "partition", "offset", "key", "value")
    ]
    # Kafka's timestamp (the event's commit time through CDC), kept as epoch milliseconds.
    micros = pc.cast(batch.column("timestamp"), pa.int64()).to_pylist()
    return [
        KafkaRecord(
            topic, partition, offset, key, value, record_headers, None if ts is None else ts // 1000
        )
        for topic, partition, offset, key, value, record_headers, ts in zip(
            *columns, headers_from_arrow(batch.column("headers")), micros, strict=True
        )
    ]


def headers_from_arrow(column: pa.ListArray) -> list[list[tuple[str, bytes | None]]]:
    """Each record's (name, value) header pairs, in order, out of the Kafka source's headers
    column; a null list reads as no headers. ``flatten`` takes the column's own slice and skips
    null lists, so the flat pairs follow the lengths of the lists that are there."""
    lengths = pc.fill_null(column.value_lengths(), 0).to_pylist()
    names, values = (field.to_pylist() for field in column.flatten().flatten())
    pairs = list(zip(names, values, strict=True))
    out: list[list[tuple[str, bytes | None]]] = []
    start = 0
    for length in lengths:
        end = start + length
        out.append(pairs[start:end])
        start = end
    return out


def apply_batches(
    jobs: Sequence[Job],
    batches: Iterator[pa.RecordBatch],
    identities: Mapping[str, TopicIdentity] | None = None,
    epochs: Mapping[str, Mapping[tuple[str, int], int]] | None = None,
) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: group this Spark partition's records by Kafka partition and apply each
    group, for every job reading its topic, in that job's own inbox transaction; yield one
    result row per (job, Kafka partition). ``identities``: each topic's, as the driver read it
    for this micro-batch (what the records' offsets refer to); ``epochs``: each job's partitions'
    start-over counts when the query started."""
    identities = identities or {}
    epochs = epochs or {}
    grouped: dict[tuple[str, int], list[KafkaRecord]] = {}
    for batch in batches:
        for record in records_from_arrow(batch):
            grouped.setdefault((record.topic, record.partition), []).append(record)
    if grouped and identities:
        fetched_as_read(jobs, identities, sorted({topic for topic, _ in grouped}))
    summaries: list[SliceSummary] = []
    for (topic, partition), records in sorted(grouped.items()):
        for job in jobs:
            if topic not in job.topics:
                continue
            inbox = job.inbox(_engine(job))
            clock = HandlerClock()
            inbox = dataclasses.replace(inbox, handlers=clock.around(inbox.batch))
            started = time.perf_counter()
            # The database unreachable (restart, failover): the same records again, after a
            # backoff; the inbox makes a retry idempotent. Data errors never get here: they park.
            result, retries = retrying(
                functools.partial(
                    inbox.apply_partition,
                    records,
                    identities.get(topic),
                    reader_epoch(epochs.get(job.name), topic, partition),
                ),
                retryable=is_transient,
                backoff=dataclasses.replace(BATCH_RETRY, budget=job.batch_retry_seconds),
                what=f"{job.name} {topic}[{partition}]",
            )
            summaries.append(
                SliceSummary.of(
                    job.name,
                    result,
                    retries=retries,
                    seconds=time.perf_counter() - started,
                    handler_seconds=clock.seconds,
                )
            )
    yield to_arrow(summaries)


_READERS: dict[str, TopicIdentities] = {}  # per executor process and cluster


class TopicChanged(RuntimeError):
    """A topic's id changed between the driver's read and the task's fetch: the micro-batch
    fails, nothing of it applied, and the query restarts (its next read judges the
    partitions)."""


def fetched_as_read(
    jobs: Sequence[Job], identities: Mapping[str, TopicIdentity], topics: Sequence[str]
) -> None:
    """Raise `TopicChanged` when a topic's identity, read again once the task has fetched its
    records, is not the one the driver read for this micro-batch. The driver reads the ids
    after Spark fixed the batch's offsets and before the executors fetch: a topic re-created
    and refilled in between would give records of its new incarnation under the old identity.
    A topic id names one incarnation, so the same id on both sides of the fetch proves the
    records are of it. One admin round trip per task, on a client kept per process."""
    job = next(j for j in jobs if any(t in j.topics for t in topics))
    key = f"{job.bootstrap_servers} {sorted(job.kafka_options.items())}"
    if key not in _READERS:
        _READERS[key] = TopicIdentities.of(job)
    asked = [t for t in topics if t in identities]
    now = _identities(_READERS[key], asked) or {}
    for topic in asked:
        if now.get(topic) != identities[topic]:
            seen = now.get(topic)
            raise TopicChanged(
                f"topic {topic}: {identities[topic].describe()} when the micro-batch was "
                f"planned, {seen.describe() if seen else 'gone'} after its records were "
                "fetched (re-created meanwhile): nothing applied, the query restarts"
            )


def reader_epoch(
    epochs: Mapping[tuple[str, int], int] | None, topic: str, partition: int
) -> int | None:
    """The start-over count a slice carries: its query's, read when the query started. A
    partition without a row then was at 0 (a row's first count), so a start-over or rewind of
    it since is still noticed; None (no counts given) checks nothing."""
    return None if epochs is None else epochs.get((topic, partition), 0)


_SETTLED: list[bool] = []  # this worker process froze its long-lived objects (`_settle`)


def _settle() -> None:
    """Once per Python worker, after its first task: what lives as long as the worker (modules,
    engines, compiled statements, caches) is moved out of the cyclic garbage collector's reach
    (``gc.freeze``), after one last collection so that no garbage is frozen with it.

    PySpark's daemon runs a full ``gc.collect()`` in a reused worker after every task. Over the
    ~140,000 objects the framework's imports hold, that was ~125 ms of the workers' CPU per
    one-record micro-batch, 93% of what they spent on such batches (py-spy, `bench pipeline`;
    9-11 ms per batch frozen). Frozen objects are still freed by
    reference counting; later collections look only at younger objects."""
    if not _SETTLED:
        gc.collect()
        gc.freeze()
        _SETTLED.append(True)


def traced_batches(
    jobs: Sequence[Job],
    batches: Iterator[pa.RecordBatch],
    batch_span: str | None,
    identities: Mapping[str, TopicIdentity] | None = None,
    epochs: Mapping[str, Mapping[tuple[str, int], int]] | None = None,
) -> Iterator[pa.RecordBatch]:
    """`apply_batches` in a Python worker: its tracing set up (once per process), the driver's
    micro-batch span (``batch_span``, a traceparent) current, so the record spans link to it,
    and every span exported before the task ends: a worker is reused for other tasks or killed
    with the driver, and spans still queued in it would be lost."""
    tracing.configure(TRACE_SERVICE)
    try:
        with spans.current_context(TraceContext.parse(batch_span)):
            results = list(apply_batches(jobs, batches, identities, epochs))
    finally:
        tracing.flush()
    _settle()
    yield from results


def _identities(identities: Any, topics: Sequence[str]) -> Mapping[str, TopicIdentity] | None:
    """The topics' identities for one micro-batch (on the driver, and again in each task after
    its fetch, `fetched_as_read`). When Kafka's admin API does not answer, the batch fails (the
    query is restarted from its checkpoint): applied unchecked, the records of a topic
    re-created at that moment would be judged by position from the middle of the new topic,
    and its start skipped once the partition is started over."""
    if identities is None:
        return None
    # A broker or the controller moving: ask again, then fail.
    read, _ = retrying(
        lambda: dict(identities.read(topics)),
        retryable=lambda exc: isinstance(exc, Exception),
        backoff=IDENTITY_RETRY,
        what="topic ids",
    )
    return read


def inbox_sink(
    jobs: Sequence[Job], on_batch: Any = None, identities: Any = None, epochs: Any = None
) -> Any:
    """A foreachBatch function applying each micro-batch through the jobs' inboxes; tells
    ``on_batch(job_name, batch_id, summaries)`` per job what it did (a `SliceSummary` per Kafka
    partition). ``identities`` (a `spark_consumers.identity.TopicIdentities`): read per batch,
    so that a partition whose topic changed identity stops instead of taking new offsets for
    replays; ``epochs`` (`spark_consumers.identity.prepare_start`'s) are checked by every slice,
    so that a task left over from before a start-over cannot apply from the middle of a topic."""
    jobs = tuple(jobs)
    name = query_name(jobs)
    topics = tuple(sorted({t for job in jobs for t in job.topics}))

    def sink(frame: Any, batch_id: int) -> None:
        # One task per core: launching a Python task cost more than applying a small slice.
        # coalesce merges whole input partitions (one per Kafka partition), never splits one,
        # so each Kafka partition is still applied by one task, in offset order.
        slots = frame.sparkSession.sparkContext.defaultParallelism
        batch = spans.start(
            f"micro-batch {name}", parent=None, attributes={"outboxkit.batch.id": batch_id}
        )
        link = batch.context.header() if batch.recording else None
        try:
            now = _identities(identities, topics)
            results = (
                frame.coalesce(slots)
                .mapInArrow(lambda it: traced_batches(jobs, it, link, now, epochs), SPARK_SCHEMA)
                .collect()
            )
        except Exception as exc:
            batch.end(error=repr(exc))
            raise
        batch.end(
            {
                "outboxkit.partitions": len(results),
                "outboxkit.applied": sum(r.applied for r in results),
            }
        )
        if on_batch is not None:
            summaries = [SliceSummary.from_row(r.asDict()) for r in results]
            for job in jobs:
                on_batch(job.name, batch_id, [s for s in summaries if s.job == job.name])

    return sink
