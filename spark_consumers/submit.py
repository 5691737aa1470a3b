"""spark-submit's primary resource for consumer jobs: ``spark-submit [options] FILE JOB...``
runs the jobs (``module:attr`` of a `Job`) in the driver (`spark_consumers.driver`), under
spark-submit's master and jars, until SIGTERM (or with ``--once`` until what the topics hold is
applied).

The file ships in the wheel: ``python -m spark_consumers.submit --path`` prints where it is."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from spark_consumers.driver import DEFAULT_CHECKPOINT, START_TIMEOUT
from spark_consumers.job import DEFAULT_TRIGGER_SECONDS


def add_driver_options(parser: argparse.ArgumentParser) -> None:
    """The driver's options; `outboxkit consume` takes the same (a unit test keeps them equal)."""
    parser.add_argument("jobs", nargs="*", metavar="JOB", help="module:attr of a Job")
    parser.add_argument(
        "--checkpoint",
        type=Path,
        default=DEFAULT_CHECKPOINT,
        help="folder of the queries' checkpoints",
    )
    parser.add_argument(
        "--trigger",
        type=float,
        help="seconds between batches; lower: shorter hops, more idle CPU (default: "
        f"{DEFAULT_TRIGGER_SECONDS})",
    )
    parser.add_argument("--once", action="store_true", help="apply what is there, then stop")
    parser.add_argument(
        "--query-per-job",
        action="store_true",
        help="one streaming query per job (default: one per Kafka cluster, each topic read once)",
    )
    parser.add_argument(
        "--no-release",
        action="store_true",
        help="run no releaser of scheduled messages here (default: one per jobs' database; "
        "the services' replicas run theirs)",
    )
    parser.add_argument(
        "--metrics-port", type=int, help="serve Prometheus metrics on this port, 0: a free one"
    )
    parser.add_argument("--metrics-host", help="the address the metrics listen on")
    parser.add_argument(
        "--start-timeout",
        type=float,
        help="seconds to keep asking the jobs' Kafka clusters and databases at start, while "
        f"they restart or are not yet up (default: {START_TIMEOUT:.0f}; 0: ask once)",
    )


def parser() -> argparse.ArgumentParser:
    """The driver's arguments."""
    parsed = argparse.ArgumentParser(
        prog="spark-submit ... submit.py",
        description="Run consumer jobs in a driver started by spark-submit.",
    )
    add_driver_options(parsed)
    parsed.add_argument("--path", action="store_true", help="print this file's path and exit")
    return parsed


def main(argv: Sequence[str] | None = None) -> int:
    """Run the jobs named in ``argv`` (or print this file's path)."""
    args = parser().parse_args(argv)
    if args.path:
        print(Path(__file__).resolve())
        return 0
    if not args.jobs:
        parser().error("name at least one JOB (module:attr of a Job)")
    from spark_consumers.driver import configure_logging, drive, options_of
    from spark_consumers.job import load_job

    configure_logging()
    sys.path.insert(0, str(Path.cwd()))  # the jobs' modules, as `outboxkit consume` finds them
    jobs = [load_job(spec) for spec in args.jobs]
    return drive(jobs, options_of(args), say=lambda line: print(line, flush=True))


if __name__ == "__main__":
    sys.exit(main())
