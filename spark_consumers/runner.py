"""Run consumer jobs as Structured Streaming queries sharing one SparkSession."""

from __future__ import annotations

import json
import logging
import re
import signal
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from inbox.recorder import Recorder
from outboxkit.kernel import tracing
from outboxkit.kernel.kafka.security import client_config, spark_source_options
from spark_consumers.identity import TopicIdentities, prepare_start
from spark_consumers.job import DEFAULT_TRIGGER_SECONDS, Job, query_name
from spark_consumers.listeners import add_listeners
from spark_consumers.progress import ProgressLog
from spark_consumers.retrier import Retrier
from spark_consumers.retry import RestartBudget
from spark_consumers.sink import TRACE_SERVICE, inbox_sink
from spark_consumers.summary import SliceSummary

log = logging.getLogger("outboxkit.consumers")

# A task reads a planned, existing offset range: the broker never has to wait for data. With
# read_committed the range ends on a transaction marker, and the consumer cannot re-fetch at the
# marker while its prefetch of the range's end sits on the broker for fetch.max.wait.ms (500 ms
# by default): that wait was most of a small batch's read time (0.2-0.4 s for a few records).
FETCH_MAX_WAIT_MS = "10"

# Told per job and micro-batch what the inbox did with each Kafka partition's slice.
BatchCallback = Callable[[str, int, list[SliceSummary]], None]


def inbox_positions(job: Job) -> dict[tuple[str, int], int]:
    """Next offset per (topic, partition) from the inbox watermarks (job without checkpoint)."""
    engine = job.engine("once")
    try:
        with engine.connect() as conn:
            return Recorder(job.consumer).positions(conn, job.topics)
    finally:
        engine.dispose()


def existing_partitions(jobs: Sequence[Job]) -> dict[str, list[int]]:
    """The partitions of each of the jobs' topics that exist now (topics may appear later)."""
    metadata = kafka_admin(jobs[0]).list_topics(timeout=30)
    return {
        topic: sorted(metadata.topics[topic].partitions)
        for topic in topics_of(jobs)
        if topic in metadata.topics and metadata.topics[topic].error is None
    }


def kafka_admin(job: Job) -> Any:
    """An admin client of ``job``'s Kafka cluster, reaching it as the job's clients do."""
    from confluent_kafka.admin import AdminClient

    config = client_config(job.bootstrap_servers, job.kafka_security, job.kafka_options)
    return AdminClient(dict[str, str | int | float | bool](config))


def topics_of(jobs: Sequence[Job]) -> tuple[str, ...]:
    """Every topic some job reads, each once, in a stable order."""
    return tuple(sorted({t for job in jobs for t in job.topics}))


def starting_offsets(
    positions: Sequence[tuple[Job, dict[tuple[str, int], int]]],
    partitions: dict[str, list[int]],
) -> dict[str, dict[str, int]]:
    """Spark's startingOffsets: per existing partition, the lowest inbox position of the jobs
    reading it (earliest, -2, where one has none); jobs that were further on skip the replay
    by their watermark. Spark requires every assigned partition to be named."""
    offsets: dict[str, dict[str, int]] = {}
    for topic, parts in partitions.items():
        readers = [known for job, known in positions if topic in job.topics]
        # -2 (earliest) is below every position: one job without a watermark reads it all.
        offsets[topic] = {
            str(p): min(known.get((topic, p), -2) for known in readers) for p in parts
        }
    return offsets


def source_key(job: Job) -> tuple[Any, ...]:
    """Jobs with the same key can share one query (same brokers and client options)."""
    return (job.bootstrap_servers, job.kafka_security, tuple(sorted(job.kafka_options.items())))


def query_groups(jobs: Sequence[Job], shared: bool) -> list[tuple[Job, ...]]:
    """The jobs each query runs: all jobs of one source together when ``shared``, else one
    query per job."""
    if not shared:
        return [(job,) for job in jobs]
    groups: dict[tuple[Any, ...], list[Job]] = {}
    for job in jobs:
        groups.setdefault(source_key(job), []).append(job)
    return [tuple(group) for group in groups.values()]


def source_frame(session: Any, jobs: Sequence[Job]) -> Any:
    """The jobs' Kafka stream through Spark's own Kafka connector (spark-sql-kafka-0-10): each
    topic read once, whichever jobs read it.

    Topics are matched by an exact pattern, so a topic that does not exist yet is picked up when
    it appears (from its first offset) instead of failing the query. Only committed records are
    read (read_committed): records of an aborted Kafka transaction never reach a handler. A query
    without a checkpoint starts from its jobs' inbox watermarks, the source of truth for what was
    applied. failOnDataLoss stays on: offsets that vanished before they were applied (retention,
    a deleted topic) stop the query loudly rather than being skipped; the gaps that transaction
    markers leave are not data loss and Spark skips them.
    """
    first = jobs[0]
    positions = [(job, inbox_positions(job)) for job in jobs]
    offsets = starting_offsets(positions, existing_partitions(jobs))
    topics = topics_of(jobs)
    pattern = "^(" + "|".join(re.escape(t) for t in topics) + ")$"
    reader = (
        session.readStream.format("kafka")
        .option("kafka.bootstrap.servers", first.bootstrap_servers)
        .option("kafka.isolation.level", "read_committed")
        .option("subscribePattern", pattern)
        .option("includeHeaders", "true")
        .option("failOnDataLoss", "true")
        .option("maxOffsetsPerTrigger", min(j.max_offsets_per_trigger for j in jobs))
        .option("kafka.fetch.max.wait.ms", FETCH_MAX_WAIT_MS)
        .option("startingOffsets", json.dumps(offsets) if offsets else "earliest")
    )
    for key, value in spark_source_options(first.kafka_security).items():
        reader = reader.option(key, value)
    for key, value in first.kafka_options.items():
        reader = reader.option(f"kafka.{key}", value)
    log.info(
        "jobs %s read %s with Spark's Kafka connector (read_committed), starting at %s",
        ",".join(j.name for j in jobs),
        ",".join(topics),
        offsets or "earliest",
    )
    return reader.load()


# How the queries write their checkpoints, which are on the driver's local filesystem: through
# Hadoop's FileSystem API. Spark's default, its FileContext API, has Hadoop's local filesystem
# fork a `readlink` for both paths of every rename and a `chmod` for every file it creates
# (without Hadoop's native library). In the saga at 10 orders/s the offset log and commit log
# writes took 43-47 and 52-56 ms (p50) of each micro-batch that way against 13 and 15 ms, and a
# batch 322-347 against 244-252 ms (alternating runs). Both write a temporary file and rename it
# into place, an atomic rename on a local filesystem. A manager the session already names is
# kept.
CHECKPOINT_FILE_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"
LOCAL_CHECKPOINTS = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)


def use_local_checkpoints(session: Any) -> None:
    """Have ``session``'s queries write their checkpoints through `LOCAL_CHECKPOINTS`, unless
    it names a checkpoint manager of its own."""
    if session.conf.get(CHECKPOINT_FILE_MANAGER, None) is None:
        session.conf.set(CHECKPOINT_FILE_MANAGER, LOCAL_CHECKPOINTS)


def start_query(
    session: Any,
    jobs: Sequence[Job],
    *,
    checkpoint: Path,
    trigger_seconds: float = DEFAULT_TRIGGER_SECONDS,
    on_batch: BatchCallback | None = None,
) -> Any:
    """Start one streaming query applying every micro-batch through each of ``jobs``' inboxes
    (checkpoint under ``checkpoint``/<job names joined by '+'>), after the partitions whose
    offsets moved were dealt with (`spark_consumers.identity.prepare_start`)."""
    name = query_name(jobs)
    use_local_checkpoints(session)
    identities = TopicIdentities.of(jobs[0])
    epochs = prepare_start(jobs, identities.read(topics_of(jobs)), checkpoint)
    return (
        source_frame(session, jobs)
        .writeStream.queryName(name)
        .foreachBatch(inbox_sink(jobs, on_batch, identities, epochs))
        .option("checkpointLocation", str(checkpoint / name))
        .trigger(processingTime=f"{trigger_seconds} seconds")
        .start()
    )


def start_job(
    session: Any,
    job: Job,
    *,
    checkpoint: Path,
    trigger_seconds: float = DEFAULT_TRIGGER_SECONDS,
    on_batch: BatchCallback | None = None,
) -> Any:
    """Start one job's own streaming query.

    Args:
        session: The SparkSession.
        job: The job to run.
        checkpoint: The folder of the queries' checkpoints; this one's is ``checkpoint``/<job
            name>.
        trigger_seconds: Seconds between micro-batches.
        on_batch: Told ``on_batch(job_name, batch_id, summaries)`` what each micro-batch did
            (a `SliceSummary` per Kafka partition), after its transactions committed.
    """
    return start_query(
        session, [job], checkpoint=checkpoint, trigger_seconds=trigger_seconds, on_batch=on_batch
    )


def _restart(
    failed: Any,
    budget: RestartBudget,
    stopping: threading.Event,
    start: Callable[[tuple[Job, ...]], Any],
    group: tuple[Job, ...],
) -> Any:
    """A failed query started again from its checkpoint after the budget's delay (the batch it
    failed in is redone; the inbox skips what it had applied). Returns the new query, or the
    failed one when starting failed too (the next check tries again); raises once the budget
    is spent: failing that often is not an outage to ride out."""
    error = str(failed.exception()).splitlines()[0]
    delay = budget.next_delay()
    if delay is None:
        raise RuntimeError(
            f"query {failed.name} failed {budget.limit} times within {budget.window:.0f}s; "
            f"giving up (last error: {error})"
        )
    log.error("query %s failed: %s; restarting it in %.0fs", failed.name, error, delay)
    if stopping.wait(delay):
        return failed
    try:
        query = start(group)
    except Exception as exc:  # e.g. the database still down: positions cannot be read yet
        log.error("query %s could not restart: %s", failed.name, str(exc).splitlines()[0])
        return failed
    log.info("query %s restarted from its checkpoint", query.name)
    return query


def run_jobs(
    jobs: Sequence[Job],
    *,
    checkpoint: Path,
    trigger_seconds: float = DEFAULT_TRIGGER_SECONDS,
    once: bool = False,
    on_batch: BatchCallback | None = None,
    session: Any = None,
    jars: Sequence[Path] = (),
    shared: bool = True,
    listeners: Sequence[Any] = (),
) -> None:
    """Run jobs in one SparkSession until SIGTERM/SIGINT, or (``once``) until input is applied.

    A failed query is started again from its checkpoint (the inbox skips what its batch had
    applied), a bounded number of times within a time window; then it raises RuntimeError.
    Beside the queries, a thread redrives the parked records whose delayed retry is due, about
    every second (`spark_consumers.retrier.Retrier`; not with ``once``).

    Args:
        jobs: The jobs to run.
        checkpoint: The folder of the queries' checkpoints, one per query (``checkpoint``/<its
            job names joined by '+'>).
        trigger_seconds: Seconds between micro-batches.
        once: Apply what the topics hold now, then return.
        on_batch: Told ``on_batch(job_name, batch_id, summaries)`` what each micro-batch did
            (a `SliceSummary` per Kafka partition), after its transactions committed.
        session: The SparkSession; None builds one (`build_session`).
        jars: Spark's Kafka connector and its dependencies, for the session built here.
        shared: Jobs reading the same Kafka cluster run in ONE query that reads each topic once
            and applies each partition's slice for every job reading it (each in its own inbox
            transaction). A micro-batch's fixed cost (planning, offset log, commit log, one
            Spark job) is paid once per trigger instead of once per job: on a small driver that
            cost, not the inbox, bounds latency. False: one query per job (isolated checkpoints
            and failures).
        listeners: More StreamingQueryListeners (e.g. the driver's metrics), besides the log.
    """
    from spark_consumers.session import build_session

    session = session or build_session("outboxkit-consumers", jars=jars)
    tracing.configure(TRACE_SERVICE)  # the micro-batch spans, when OTEL_* ask for tracing
    add_listeners(session, (ProgressLog(), *listeners))
    groups = query_groups(jobs, shared)

    def start(group: tuple[Job, ...]) -> Any:
        return start_query(
            session,
            group,
            checkpoint=checkpoint,
            trigger_seconds=trigger_seconds,
            on_batch=on_batch,
        )

    queries = [start(group) for group in groups]  # jobs are not hashable: by index
    stopping = threading.Event()
    retrier = Retrier([] if once else jobs).start()

    def stop(signum: int, _frame: Any) -> None:
        stopping.set()

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        if once:
            for query in queries:
                query.processAllAvailable()
        else:
            budgets = [RestartBudget() for _ in groups]
            while not stopping.is_set():
                for n, query in enumerate(queries):
                    if query.exception() is not None and not stopping.is_set():
                        queries[n] = _restart(query, budgets[n], stopping, start, groups[n])
                stopping.wait(1.0)
    finally:
        retrier.stop()
        for query in queries:
            query.stop()  # waits for the running batch: its transactions commit or roll back
        for sig, handler in previous.items():
            signal.signal(sig, handler)
