"""spark-submit's primary resource for consumer jobs: ``spark-submit [options] FILE JOB...``
runs the jobs (``module:attr`` of a `Job`) in the driver, under spark-submit's master and jars,
until SIGTERM (or with ``--once`` until what the topics hold is applied).

The file ships in the wheel: ``python -m spark_consumers.submit --path`` prints where it is."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from spark_consumers.job import DEFAULT_TRIGGER_SECONDS


def parser() -> argparse.ArgumentParser:
    """The driver's arguments (those of `outboxkit consume` that a submitted driver needs)."""
    parsed = argparse.ArgumentParser(
        prog="spark-submit ... submit.py",
        description="Run consumer jobs in a driver started by spark-submit.",
    )
    parsed.add_argument("jobs", nargs="*", metavar="JOB", help="module:attr of a Job")
    parsed.add_argument("--path", action="store_true", help="print this file's path and exit")
    parsed.add_argument(
        "--checkpoint", default=".outboxkit/checkpoints", help="folder of the queries' checkpoints"
    )
    parsed.add_argument(
        "--trigger",
        type=float,
        default=DEFAULT_TRIGGER_SECONDS,
        help="seconds between micro-batches",
    )
    parsed.add_argument("--once", action="store_true", help="apply what is there, then stop")
    return parsed


def main(argv: Sequence[str] | None = None) -> int:
    """Run the jobs named in ``argv`` (or print this file's path)."""
    args = parser().parse_args(argv)
    if args.path:
        print(Path(__file__).resolve())
        return 0
    if not args.jobs:
        parser().error("name at least one JOB (module:attr of a Job)")
    from spark_consumers.job import load_job
    from spark_consumers.release import releasing
    from spark_consumers.runner import run_jobs
    from spark_consumers.summary import SliceSummary

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    sys.path.insert(0, str(Path.cwd()))  # the jobs' modules, as `outboxkit consume` finds them
    jobs = [load_job(spec) for spec in args.jobs]

    def report(name: str, batch_id: int, rows: list[SliceSummary]) -> None:
        applied, parked = sum(r.applied for r in rows), sum(r.parked for r in rows)
        print(f"{name} batch {batch_id}: {applied} applied, {parked} parked", flush=True)

    with releasing([] if args.once else jobs):  # the scheduled messages the handlers write
        run_jobs(
            jobs,
            checkpoint=Path(args.checkpoint),
            trigger_seconds=args.trigger,
            once=args.once,
            on_batch=report,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
