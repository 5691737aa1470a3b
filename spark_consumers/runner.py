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

from sqlalchemy import create_engine

from inbox.recorder import Recorder
from spark_consumers.job import Job
from spark_consumers.sink import inbox_sink

log = logging.getLogger("outboxkit.consumers")

BatchCallback = Callable[[str, int, list[dict[str, Any]]], None]


def inbox_positions(job: Job) -> dict[tuple[str, int], int]:
    """Next offset per (topic, partition) from the inbox watermarks (job without checkpoint)."""
    engine = create_engine(job.database_url)
    try:
        with engine.connect() as conn:
            return Recorder(job.consumer).positions(conn, job.topics)
    finally:
        engine.dispose()


def existing_partitions(job: Job) -> dict[str, list[int]]:
    """The partitions of each of the job's topics that exist now (topics may appear later)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": job.bootstrap_servers, **job.kafka_options})
    metadata = admin.list_topics(timeout=30)
    return {
        topic: sorted(metadata.topics[topic].partitions)
        for topic in job.topics
        if topic in metadata.topics and metadata.topics[topic].error is None
    }


def starting_offsets(
    positions: dict[tuple[str, int], int], partitions: dict[str, list[int]]
) -> dict[str, dict[str, int]]:
    """Spark's startingOffsets: the inbox position of every existing partition, else earliest
    (-2). Spark requires every assigned partition to be named when offsets are given."""
    return {
        topic: {str(p): positions.get((topic, p), -2) for p in parts}
        for topic, parts in partitions.items()
    }


def source_frame(session: Any, job: Job) -> Any:
    """The job's Kafka stream through Spark's own Kafka connector (spark-sql-kafka-0-10).

    Topics are matched by an exact pattern, so a topic that does not exist yet is picked up when
    it appears (from its first offset) instead of failing the query. Only committed records are
    read (read_committed): records of an aborted Kafka transaction never reach a handler. A job
    without a checkpoint starts from its inbox watermarks, the source of truth for what was
    applied. failOnDataLoss stays on: offsets that vanished before they were applied (retention,
    a deleted topic) stop the query loudly rather than being skipped; the gaps that transaction
    markers leave are not data loss and Spark skips them.
    """
    offsets = starting_offsets(inbox_positions(job), existing_partitions(job))
    pattern = "^(" + "|".join(re.escape(t) for t in job.topics) + ")$"
    reader = (
        session.readStream.format("kafka")
        .option("kafka.bootstrap.servers", job.bootstrap_servers)
        .option("kafka.isolation.level", "read_committed")
        .option("subscribePattern", pattern)
        .option("includeHeaders", "true")
        .option("failOnDataLoss", "true")
        .option("maxOffsetsPerTrigger", job.max_offsets_per_trigger)
        .option("startingOffsets", json.dumps(offsets) if offsets else "earliest")
    )
    for key, value in job.kafka_options.items():
        reader = reader.option(f"kafka.{key}", value)
    log.info(
        "job %s reads %s with Spark's Kafka connector (read_committed), starting at %s",
        job.name,
        ",".join(job.topics),
        offsets or "earliest",
    )
    return reader.load()


def start_job(
    session: Any,
    job: Job,
    *,
    checkpoint: Path,
    trigger_seconds: float = 1.0,
    on_batch: BatchCallback | None = None,
) -> Any:
    """Start one job's streaming query."""
    callback = None if on_batch is None else (lambda bid, rows: on_batch(job.name, bid, rows))
    return (
        source_frame(session, job)
        .writeStream.queryName(job.name)
        .foreachBatch(inbox_sink(job, callback))
        .option("checkpointLocation", str(checkpoint / job.name))
        .trigger(processingTime=f"{trigger_seconds} seconds")
        .start()
    )


def run_jobs(
    jobs: Sequence[Job],
    *,
    checkpoint: Path,
    trigger_seconds: float = 1.0,
    once: bool = False,
    on_batch: BatchCallback | None = None,
    session: Any = None,
    jars: Sequence[Path] = (),
) -> None:
    """Run jobs in one SparkSession until SIGTERM/SIGINT, or (``once``) until input is applied."""
    from spark_consumers.session import build_session

    session = session or build_session("outboxkit-consumers", jars=jars)
    queries = [
        start_job(
            session, job, checkpoint=checkpoint, trigger_seconds=trigger_seconds, on_batch=on_batch
        )
        for job in jobs
    ]
    stopping = threading.Event()

    def stop(signum: int, _frame: Any) -> None:
        stopping.set()

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        if once:
            for query in queries:
                query.processAllAvailable()
        else:
            while not stopping.is_set():
                for query in queries:
                    if query.exception() is not None:
                        raise RuntimeError(f"query {query.name} failed: {query.exception()}")
                stopping.wait(1.0)
    finally:
        for query in queries:
            query.stop()  # waits for the running batch: its transactions commit or roll back
        for sig, handler in previous.items():
            signal.signal(sig, handler)
