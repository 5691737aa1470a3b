"""`outboxkit db upgrade|downgrade|current`: the framework's migrations on the database the
settings (or the local stack's state file) give."""

from __future__ import annotations

import argparse

from outboxkit.endpoints import resolve
from outboxkit.settings import Settings


def _db(args: argparse.Namespace, settings: Settings) -> int:
    from migrations import runner

    url = resolve(settings).database_url(args.url)
    if args.action == "upgrade":
        runner.upgrade(url, args.revision or "head")
    elif args.action == "downgrade":
        runner.downgrade(url, args.revision or "base")
    print(f"database at revision {runner.current(url)} (head {runner.head()})")
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    db = sub.add_parser("db", help="framework migrations")
    db.add_argument(
        "action",
        choices=["upgrade", "downgrade", "current"],
        help="upgrade (to head), downgrade (to base) or print the current revision",
    )
    db.add_argument("--url", help="database URL (default: settings, then the local stack)")
    db.add_argument(
        "--revision", help="upgrade/downgrade: the target revision (default: head/base)"
    )
    db.set_defaults(run=_db)
