"""`outboxkit outbox cleanup`: the outbox table's maintenance in retain mode."""

from __future__ import annotations

import argparse
from datetime import timedelta

from outboxkit.endpoints import resolve
from outboxkit.settings import Settings


def _outbox(args: argparse.Namespace, settings: Settings) -> int:
    from outbox import cleanup

    engine = resolve(settings).engine(args.url)
    deleted = cleanup.cleanup(engine, older_than=timedelta(hours=args.older_than_hours))
    with engine.connect() as conn:
        left = cleanup.count(conn)
    print(
        f"outbox cleanup: deleted {deleted} rows older than {args.older_than_hours}h, {left} left"
    )
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    outbox = sub.add_parser("outbox", help="outbox table maintenance (retain mode)")
    outbox.add_argument(
        "action", choices=["cleanup"], help="cleanup: delete the published rows older than the age"
    )
    outbox.add_argument(
        "--older-than-hours", type=float, default=24.0, help="age of the rows to delete, in hours"
    )
    outbox.add_argument("--url", help="database URL (default: settings, then the local stack)")
    outbox.set_defaults(run=_outbox)
