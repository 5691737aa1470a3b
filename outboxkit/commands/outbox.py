"""`outboxkit outbox cleanup`: the outbox table's maintenance in retain mode."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from outboxkit.parsers import SubParsers, add_url, command, group

if TYPE_CHECKING:
    from outboxkit.settings import Settings


def _cleanup(args: argparse.Namespace, settings: Settings) -> int:
    from datetime import timedelta

    from outbox import cleanup
    from outboxkit.endpoints import resolve

    engine = resolve(settings).engine(args.url)
    deleted = cleanup.cleanup(engine, older_than=timedelta(hours=args.older_than_hours))
    with engine.connect() as conn:
        left = cleanup.count(conn)
    print(
        f"outbox cleanup: deleted {deleted} rows older than {args.older_than_hours}h, {left} left"
    )
    return 0


def add_parser(sub: SubParsers) -> None:
    actions = group(sub, "outbox", help="outbox table maintenance (retain mode)")
    cleanup = command(
        actions, "cleanup", _cleanup, help="delete the published rows older than an age"
    )
    cleanup.add_argument(
        "--older-than-hours", type=float, default=24.0, help="age of the rows to delete, in hours"
    )
    add_url(cleanup)
