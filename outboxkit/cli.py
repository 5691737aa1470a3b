"""The `outboxkit` command line: one command group per module of `outboxkit.commands` (and the
benchmarks in `outboxkit.bench`).

The operator commands (db, outbox, cdc, consume, inbox, audit, schemas) read
`outboxkit.settings.Settings` and find their endpoints through `outboxkit.endpoints`; only the
commands that run the local stack (stack, demo, saga, chaos, bench) read the dev stack's settings
(`outboxkit.devstack.settings.StackSettings`, named by their parser's ``settings`` default) and
build it."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from outboxkit.devstack.settings import StackSettings
from outboxkit.settings import Settings

DESCRIPTION = (
    "Exactly-once events between services: transactional outbox, Debezium, Kafka, Spark, inbox. "
    "The operator commands (db, outbox, cdc, consume, inbox, audit) take their endpoints from "
    "the OUTBOXKIT_* settings, else from the local stack's state file; stack, demo, saga, chaos "
    "and bench run the local stack; new-service writes a new service from the template."
)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the `outboxkit` command."""
    from outboxkit import __version__
    from outboxkit.bench import cli as bench
    from outboxkit.commands import (
        audit,
        cdc,
        chaos,
        consume,
        db,
        demo,
        inbox,
        new_service,
        outbox,
        saga,
        schemas,
        stack,
    )

    parser = argparse.ArgumentParser(prog="outboxkit", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"outboxkit {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for group in (
        stack,
        db,
        outbox,
        cdc,
        consume,
        inbox,
        bench,
        audit,
        schemas,
        saga,
        chaos,
        demo,
        new_service,
    ):
        group.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `outboxkit` console script."""
    args = build_parser().parse_args(argv)
    # The stack's commands read the dev stack's settings; every other command the operator's.
    settings_type: type[Settings | StackSettings] = getattr(args, "settings", Settings)
    settings = settings_type()
    run: Callable[[argparse.Namespace, Any], int] = args.run
    try:
        return run(args, settings)
    except KeyboardInterrupt:
        return 130
    except (RuntimeError, ValueError, LookupError) as exc:
        print(f"outboxkit: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
