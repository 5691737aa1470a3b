"""Run consumer jobs as Structured Streaming queries sharing one SparkSession."""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, select

from inbox.tables import watermarks
from spark_consumers.job import Job
from spark_consumers.sink import inbox_sink

BatchCallback = Callable[[str, int, list[dict[str, Any]]], None]


def builtin_kafka_available(session: Any) -> bool:
    """True when Spark's own Kafka connector (spark-sql-kafka-0-10) is on the classpath."""
    try:
        session._jvm.java.lang.Class.forName("org.apache.spark.sql.kafka010.KafkaSourceProvider")
        return True
    except Exception:  # py4j raises its own error type for ClassNotFoundException
        return False


def inbox_positions(job: Job) -> dict[str, int]:
    """Next offset per "topic:partition" from the inbox watermarks (job without checkpoint)."""
    engine = create_engine(job.database_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                select(watermarks.c.topic, watermarks.c.partition, watermarks.c.offset).where(
                    watermarks.c.consumer == job.consumer, watermarks.c.topic.in_(job.topics)
                )
            ).all()
    finally:
        engine.dispose()
    return {f"{t}:{p}": int(o) + 1 for t, p, o in rows}


def source_frame(session: Any, job: Job) -> Any:
    """The job's Kafka stream, from the built-in format if present, else the Python source."""
    positions = inbox_positions(job)
    choice = os.environ.get("OUTBOXKIT_KAFKA_SOURCE", "auto")
    builtin = choice == "builtin" or (choice == "auto" and builtin_kafka_available(session))
    reader = session.readStream.option("kafka.bootstrap.servers", job.bootstrap_servers)
    for key, value in job.kafka_options.items():
        reader = reader.option(f"kafka.{key}", value)
    reader = reader.option("subscribe", ",".join(job.topics))
    if builtin:
        nested: dict[str, dict[str, int]] = {}
        for key, offset in positions.items():
            topic, _, partition = key.rpartition(":")
            nested.setdefault(topic, {})[partition] = offset
        reader = reader.format("kafka").option("maxOffsetsPerTrigger", job.max_offsets_per_trigger)
        if nested:
            reader = reader.option("startingOffsets", json.dumps(nested))
        else:
            reader = reader.option("startingOffsets", "earliest")
        return reader.load()
    return (
        reader.format("outboxkit_kafka")
        .option("startingOffsets", json.dumps(positions))
        .option("maxOffsetsPerTrigger", str(job.max_offsets_per_trigger))
        .load()
    )


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
) -> None:
    """Run jobs in one SparkSession until SIGTERM/SIGINT, or (``once``) until input is applied."""
    from spark_consumers.session import build_session

    session = session or build_session("outboxkit-consumers")
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
