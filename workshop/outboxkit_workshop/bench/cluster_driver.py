"""The cluster scenario's pipeline driver: one shape's `cdc.pipeline` on its running stack, in a
process of its own, its Spark session submitting to the stack's Spark (`python -m`)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from outboxkit_workshop.bench import cdc
from outboxkit_workshop.devstack.settings import StackSettings
from outboxkit_workshop.devstack.stack import Stack


def main(argv: Sequence[str] | None = None) -> int:
    """One shape's pipeline measurement on its running stack, in this driver process."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--settings", type=Path, required=True, help="the stack's settings (JSON)")
    parser.add_argument("--events", type=int, required=True)
    parser.add_argument("--reps", type=int, required=True)
    parser.add_argument("--partitions", type=int, required=True)
    parser.add_argument("--warm-up", type=int, required=True)
    parser.add_argument("--result", type=Path, required=True, help="where the JSON goes")
    args = parser.parse_args(argv)
    from outboxkit_workshop.devstack.artifacts import cached_spark_jars
    from spark_consumers.session import build_session

    settings = StackSettings.model_validate_json(args.settings.read_text())
    stack = Stack(settings, echo=lambda line: None)
    master = stack.spark_master() or "local[2]"
    jars = cached_spark_jars(settings.cache_dir)
    session = build_session("outboxkit-bench-cluster", master=master, jars=jars)
    try:
        data, _ = cdc.pipeline(
            stack,
            args.result.parent,
            events=args.events,
            reps=args.reps,
            session=session,
            partitions=args.partitions,
            warm_up=args.warm_up,
        )
    finally:
        session.stop()
    args.result.write_text(json.dumps(data, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
