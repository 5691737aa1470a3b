"""The consumer driver: what runs consumer jobs in a Spark driver, whoever started it
(`outboxkit consume`, spark-submit with `spark_consumers.submit`, the deploy image): logging,
the per-batch report, the driver's metrics, the releasers of scheduled messages, and the
runner's loop until SIGTERM (or, ``once``, until what the topics hold is applied)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spark_consumers.job import DEFAULT_TRIGGER_SECONDS, Job
from spark_consumers.retry import BATCH_RETRY, retrying

if TYPE_CHECKING:
    from spark_consumers.summary import SliceSummary

DEFAULT_CHECKPOINT = Path(".outboxkit/checkpoints")
# How long one ask of a job's Kafka cluster waits for an answer before Spark starts.
REACH_SECONDS = 10.0
# How long the driver keeps asking its jobs' Kafka clusters and databases at start: as long as a
# running consumer rides an outage out.
START_TIMEOUT = BATCH_RETRY.budget


@dataclass(frozen=True)
class DriverOptions:
    """How the driver runs its jobs.

    Attributes:
        checkpoint: The folder of the queries' checkpoints.
        trigger_seconds: Seconds between micro-batches.
        once: Apply what the topics hold, then stop (no releasers).
        query_per_job: One streaming query per job (default: one per Kafka cluster).
        release: Run the releasers of scheduled messages here (one per jobs' database).
        metrics_port: Serve Prometheus metrics on this port (0: a free one); None: none.
        metrics_host: The address the metrics listen on.
        jars: Jars handed to Spark (its Kafka connector), unless spark-submit gave them.
        start_timeout: Seconds to keep asking the jobs' Kafka clusters and databases at start
            (restarting, not yet accepting connections) before giving up; 0: ask once.
    """

    checkpoint: Path = DEFAULT_CHECKPOINT
    trigger_seconds: float = DEFAULT_TRIGGER_SECONDS
    once: bool = False
    query_per_job: bool = False
    release: bool = True
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    jars: Sequence[Path] = ()
    start_timeout: float = START_TIMEOUT


def options_of(
    args: Any,
    *,
    metrics_port: int | None = None,
    metrics_host: str = "127.0.0.1",
    jars: Sequence[Path] = (),
) -> DriverOptions:
    """The driver's options from parsed arguments (`spark_consumers.submit`'s or `outboxkit
    consume`'s) (the given defaults where they are unset)."""
    return DriverOptions(
        checkpoint=Path(args.checkpoint),
        trigger_seconds=DEFAULT_TRIGGER_SECONDS if args.trigger is None else args.trigger,
        once=args.once,
        query_per_job=args.query_per_job,
        release=not args.no_release,
        metrics_port=metrics_port if args.metrics_port is None else args.metrics_port,
        metrics_host=args.metrics_host or metrics_host,
        jars=tuple(jars),
        start_timeout=START_TIMEOUT if args.start_timeout is None else args.start_timeout,
    )


def batch_line(name: str, batch_id: int, rows: Sequence[SliceSummary]) -> str:
    """One micro-batch of a query, as the driver reports it."""
    applied = sum(r.applied for r in rows)
    skipped = sum(r.skipped for r in rows)
    parked = sum(r.parked for r in rows)
    published = sum(r.published for r in rows)
    retries = sum(r.retries for r in rows)
    return (
        f"{name} batch {batch_id}: {applied} applied, {skipped} skipped, "
        f"{parked} parked, {published} published over {len(rows)} partition(s)"
        + (f", {retries} retries (database unreachable)" if retries else "")
    )


def configure_logging() -> None:
    """The driver's log lines, without py4j's one per JVM call or Alembic's one per plugin."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)


def drive(jobs: Sequence[Job], options: DriverOptions, say: Callable[[str], Any] = print) -> int:
    """Run ``jobs`` as ``options`` say until stopped; ``say`` prints the driver's lines."""
    from spark_consumers.release import releasing
    from spark_consumers.runner import run_jobs

    say(f"consuming {', '.join(j.name for j in jobs)} (checkpoints in {options.checkpoint})")
    reach(jobs, options.start_timeout)
    metrics = _metrics(jobs, options, say)

    def on_batch(name: str, batch_id: int, rows: list[SliceSummary]) -> None:
        say(batch_line(name, batch_id, rows))
        if metrics is not None:
            metrics.on_batch(name, batch_id, rows)

    releases = [] if options.once or not options.release else jobs
    try:
        with releasing(releases, registry=None if metrics is None else metrics.registry):
            run_jobs(
                jobs,
                checkpoint=options.checkpoint,
                trigger_seconds=options.trigger_seconds,
                once=options.once,
                on_batch=on_batch,
                jars=list(options.jars),
                shared=not options.query_per_job,
                listeners=[] if metrics is None else [metrics.listener],
            )
    finally:
        if metrics is not None:
            metrics.close()
    return 0


def reach(jobs: Sequence[Job], timeout: float = START_TIMEOUT) -> None:
    """Ask each Kafka cluster and each database of ``jobs`` before Spark starts, again and again
    with the back-off a running consumer rides an outage out with, for up to ``timeout``
    seconds: one still away then fails here with its reason (librdkafka's, or the database
    driver's, which the command reports naming the job's setting), not after Spark's start and
    its own timeouts."""
    from sqlalchemy import text

    from outboxkit.kernel.errors import is_transient
    from outboxkit.kernel.kafka.failures import unanswered
    from spark_consumers.runner import kafka_admin, query_groups

    backoff = replace(BATCH_RETRY, budget=timeout)
    for group in query_groups(jobs, shared=True):
        job = group[0]  # named for the command's error: the job whose cluster did not answer
        admin = kafka_admin(job)

        def topics(admin: Any = admin) -> None:
            admin.list_topics(timeout=REACH_SECONDS)

        retrying(
            topics,
            retryable=unanswered,
            backoff=backoff,
            what=f"job {job.name}: Kafka at {job.bootstrap_servers}",
        )
    for job in {j.database_url: j for j in jobs}.values():  # each database once
        engine = job.engine("once")

        def ask(engine: Any = engine) -> None:
            with engine.connect() as connection:
                connection.execute(text("SELECT 1"))

        try:
            retrying(
                ask,
                retryable=is_transient,
                backoff=backoff,
                what=f"job {job.name}: its database at {engine.url.host}",
            )
        finally:
            engine.dispose()


def _metrics(jobs: Sequence[Job], options: DriverOptions, say: Callable[[str], Any]) -> Any:
    """The driver's metrics, served when a port is set."""
    if options.metrics_port is None:
        return None
    from spark_consumers.metrics import DriverMetrics

    metrics = DriverMetrics(jobs)
    bound = metrics.serve(options.metrics_host, options.metrics_port)
    say(f"metrics on http://{options.metrics_host}:{bound}/metrics")
    return metrics
