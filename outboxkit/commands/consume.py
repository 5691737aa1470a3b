"""`outboxkit consume JOB...`: consumer jobs on Spark Structured Streaming, with their metrics."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from outboxkit.parsers import SubParsers, command

if TYPE_CHECKING:
    from outboxkit.settings import Settings
    from spark_consumers.summary import SliceSummary


def _consume(args: argparse.Namespace, settings: Settings) -> int:
    from outboxkit.commands.errors import load_job

    # The jobs' modules are found in the current folder, as uvicorn and the spark-submit
    # driver (spark_consumers.submit) find theirs: a console script's path has only its bin/.
    sys.path.insert(0, os.getcwd())
    jobs = [load_job(spec) for spec in args.jobs]  # a bad reference fails before Spark starts
    from rich.console import Console

    from outboxkit.endpoints import spark_jars
    from spark_consumers.job import DEFAULT_TRIGGER_SECONDS
    from spark_consumers.release import releasing
    from spark_consumers.runner import run_jobs

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)  # one line per JVM call otherwise
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)  # a line per plugin
    console = Console()

    def report(name: str, batch_id: int, rows: list[SliceSummary]) -> None:
        applied = sum(r.applied for r in rows)
        skipped = sum(r.skipped for r in rows)
        parked = sum(r.parked for r in rows)
        published = sum(r.published for r in rows)
        retries = sum(r.retries for r in rows)
        console.print(
            f"{name} batch {batch_id}: {applied} applied, {skipped} skipped, "
            f"{parked} parked, {published} published over {len(rows)} partition(s)"
            + (f", {retries} retries (database unreachable)" if retries else "")
        )

    console.print(f"consuming {', '.join(j.name for j in jobs)} (checkpoints in {args.checkpoint})")
    metrics = _consumer_metrics(args, settings, jobs, console)
    listeners = [] if metrics is None else [metrics.listener]

    def on_batch(name: str, batch_id: int, rows: list[SliceSummary]) -> None:
        report(name, batch_id, rows)
        if metrics is not None:
            metrics.on_batch(name, batch_id, rows)

    releases = [] if args.once or args.no_release else jobs
    registry = None if metrics is None else metrics.registry
    try:
        with releasing(releases, registry=registry):  # what the handlers schedule
            run_jobs(
                jobs,
                checkpoint=Path(args.checkpoint),
                trigger_seconds=DEFAULT_TRIGGER_SECONDS if args.trigger is None else args.trigger,
                once=args.once,
                on_batch=on_batch,
                jars=spark_jars(settings),
                shared=not args.query_per_job,
                listeners=listeners,
            )
    finally:
        if metrics is not None:
            metrics.close()
    return 0


def _consumer_metrics(
    args: argparse.Namespace, settings: Settings, jobs: Sequence[Any], console: Any
) -> Any:
    """The driver's metrics, served when a port is set (--metrics-port, else settings)."""
    port = settings.consumer_metrics_port if args.metrics_port is None else args.metrics_port
    if port is None:
        return None
    from spark_consumers.metrics import DriverMetrics

    host = args.metrics_host or settings.consumer_metrics_host
    metrics = DriverMetrics(jobs)
    bound = metrics.serve(host, port)
    console.print(f"metrics on http://{host}:{bound}/metrics")
    return metrics


def add_parser(sub: SubParsers) -> None:
    consume = command(
        sub, "consume", _consume, help="run consumer jobs (Spark Structured Streaming)"
    )
    consume.add_argument("jobs", nargs="+", metavar="JOB", help="module:attr of a Job")
    consume.add_argument(
        "--trigger",
        type=float,
        help="seconds between batches; lower: shorter hops, more idle CPU (default: "
        "spark_consumers.job.DEFAULT_TRIGGER_SECONDS, 1.0)",
    )
    consume.add_argument(
        "--checkpoint", default=".outboxkit/checkpoints", help="folder of the queries' checkpoints"
    )
    consume.add_argument("--once", action="store_true", help="apply what is there, then stop")
    consume.add_argument(
        "--query-per-job",
        action="store_true",
        help="one streaming query per job (default: one per Kafka cluster, each topic read once)",
    )
    consume.add_argument(
        "--no-release",
        action="store_true",
        help="run no releaser of scheduled messages here (default: one per jobs' database; "
        "the services' replicas run theirs)",
    )
    consume.add_argument(
        "--metrics-port",
        type=int,
        help="serve Prometheus metrics on this port, 0: a free one "
        "(default: OUTBOXKIT_CONSUMER_METRICS_PORT; unset: none)",
    )
    consume.add_argument(
        "--metrics-host", help="metrics address (default: OUTBOXKIT_CONSUMER_METRICS_HOST)"
    )
