"""`outboxkit db upgrade|downgrade|current`: the framework's migrations on the database the
settings (or the local stack's state file) give."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from outboxkit.parsers import SubParsers, add_url, command, group

if TYPE_CHECKING:
    from outboxkit.settings import Settings


def _upgrade(args: argparse.Namespace, settings: Settings) -> int:
    from migrations import runner

    return _report(args, settings, lambda url: runner.upgrade(url, args.revision))


def _downgrade(args: argparse.Namespace, settings: Settings) -> int:
    from migrations import runner

    return _report(args, settings, lambda url: runner.downgrade(url, args.revision))


def _current(args: argparse.Namespace, settings: Settings) -> int:
    return _report(args, settings, lambda url: None)


def _report(args: argparse.Namespace, settings: Settings, migrate: Callable[[Any], object]) -> int:
    """Run ``migrate(url)``, then print the revision the database is at."""
    from migrations import runner
    from outboxkit.endpoints import resolve

    url = resolve(settings).database_url(args.url)
    migrate(url)
    print(f"database at revision {runner.current(url)} (head {runner.head()})")
    return 0


def add_parser(sub: SubParsers) -> None:
    actions = group(sub, "db", help="the framework's migrations")
    upgrade = command(actions, "upgrade", _upgrade, help="migrate the database up to a revision")
    upgrade.add_argument("--revision", default="head", help="the target revision")
    add_url(upgrade)
    downgrade = command(
        actions, "downgrade", _downgrade, help="migrate the database down to a revision"
    )
    downgrade.add_argument("--revision", default="base", help="the target revision")
    add_url(downgrade)
    current = command(actions, "current", _current, help="print the database's revision")
    add_url(current)
