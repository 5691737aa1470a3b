"""`outboxkit consume JOB...`: consumer jobs on Spark Structured Streaming, run by the one
consumer driver (`spark_consumers.driver`) with the operator settings' jars and metrics."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from outboxkit.parsers import SubParsers, command

if TYPE_CHECKING:
    from outboxkit.settings import Settings


def _consume(args: argparse.Namespace, settings: Settings) -> int:
    from outboxkit.commands.errors import load_job

    # The jobs' modules are found in the current folder, as uvicorn and the spark-submit
    # driver (spark_consumers.submit) find theirs: a console script's path has only its bin/.
    sys.path.insert(0, os.getcwd())
    jobs = [load_job(spec) for spec in args.jobs]  # a bad reference fails before Spark starts
    from rich.console import Console

    from outboxkit.endpoints import spark_jars
    from spark_consumers.driver import configure_logging, drive, options_of

    _need_java()
    configure_logging()
    options = options_of(
        args,
        metrics_port=settings.consumer_metrics_port,
        metrics_host=settings.consumer_metrics_host,
        jars=spark_jars(settings),
    )
    console = Console()
    if not options.jars:
        console.print(
            "no Spark Kafka connector jars given (OUTBOXKIT_SPARK_JARS): Spark must find "
            "spark-sql-kafka-0-10 on its own classpath (`outboxkit doctor` checks)"
        )
    return drive(jobs, options, say=console.print)


def _need_java() -> None:
    """Spark runs on a JVM: say so before it fails to start without one."""
    import shutil

    from outboxkit.commands.errors import USAGE, CommandError

    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise CommandError(
            "Spark needs Java 17 and none is on PATH or in JAVA_HOME: install it (e.g. apt-get "
            "install openjdk-17-jre-headless), or submit the jobs to a cluster with spark-submit",
            USAGE,
        )


def add_parser(sub: SubParsers) -> None:
    consume = command(
        sub,
        "consume",
        _consume,
        help="run consumer jobs (Spark Structured Streaming)",
        description="Run consumer jobs in a Spark driver here, as spark-submit runs "
        "spark_consumers/submit.py (`python -m spark_consumers.submit --path`) with the same "
        "options. The metrics port and address default to OUTBOXKIT_CONSUMER_METRICS_PORT and "
        "_HOST; Spark's Kafka jars come from OUTBOXKIT_SPARK_JARS.",
    )
    # The driver's options, as spark_consumers.submit takes them (a unit test keeps them equal).
    consume.add_argument("jobs", nargs="+", metavar="JOB", help="module:attr of a Job")
    consume.add_argument(
        "--checkpoint", default=".outboxkit/checkpoints", help="folder of the queries' checkpoints"
    )
    consume.add_argument(
        "--trigger",
        type=float,
        help="seconds between batches; lower: shorter hops, more idle CPU (default: 1.0)",
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
    consume.add_argument(
        "--start-timeout",
        type=float,
        help="seconds to keep asking the jobs' Kafka clusters and databases at start, while "
        "they restart or are not yet up (default: 300; 0: ask once)",
    )
