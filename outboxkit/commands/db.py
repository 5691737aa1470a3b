"""`outboxkit db upgrade|downgrade|current`: the framework's migrations. upgrade and current work
on the database the settings (or the local stack's state file) give; downgrade, which drops
tables, only on the one --url or OUTBOXKIT_DATABASE_URL names, down to the revision it is given,
once its plan is confirmed."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from outboxkit.commands import confirm
from outboxkit.parsers import SubParsers, add_url, command, group

if TYPE_CHECKING:
    from migrations.runner import Step
    from outboxkit.settings import Settings

DOWNGRADE = "db downgrade"
# What a downgrade to base drops, in the words of what an operator loses.
EVERYTHING = (
    "every framework table: the outbox, the inbox's watermarks (every event would be applied "
    "again), its id window, parked and skipped records, the ledger, the services' idempotency "
    "keys and the operator action log"
)


def _upgrade(args: argparse.Namespace, settings: Settings) -> int:
    from migrations import runner

    return _report(args, settings, lambda url: runner.upgrade(url, args.revision))


def _current(args: argparse.Namespace, settings: Settings) -> int:
    return _report(args, settings, lambda url: None)


def _report(args: argparse.Namespace, settings: Settings, migrate: Callable[[Any], object]) -> int:
    """Run ``migrate(url)``, then print the revision the database is at."""
    from migrations import runner
    from outboxkit.endpoints import resolve

    url = resolve(settings).database_url(args.url)
    migrate(url)
    current, head = runner.current(url), runner.head()
    if getattr(args, "json", False):
        print(json.dumps({"revision": current, "head": head, "at_head": current == head}))
    else:
        print(f"database at revision {current} (head {head})")
    return 0


def _downgrade(args: argparse.Namespace, settings: Settings) -> int:
    """Take the named database down to REVISION: the plan (the revisions stepped down), the
    confirmation, the downgrade, then a row in the action log unless the downgrade dropped it."""
    from migrations import runner

    url = _named_database(args, settings)
    shown = _without_password(url)
    current = runner.current(url)
    steps = _steps(current, args.revision)
    if not steps:
        print(f"{shown} is at revision {current or 'none (no framework table)'}: nothing to undo")
        return 0
    target = steps[-1].down_revision
    keeps_log = runner.ACTION_LOG_REVISION in runner.lineage(target)
    if not confirm.go_ahead(args, DOWNGRADE, _plan(shown, current, target, steps, keeps_log)):
        return 0
    runner.downgrade(url, target or "base")  # the planned revision, even for -N
    who = confirm.operator()
    print(f"downgraded {shown} by {who}: database at revision {runner.current(url) or 'base'}")
    if keeps_log:
        _record(url, who, shown, current, target, steps)
    else:
        print("not in the operator action log: this downgrade dropped it")
    return 0


def _named_database(args: argparse.Namespace, settings: Settings) -> Any:
    """The database --url or the settings name; never the local stack's (a downgrade drops
    tables: its target is named, not found)."""
    from outboxkit.commands.errors import CommandError
    from outboxkit.endpoints import resolve

    endpoints = resolve(settings, fallback=False)
    if not args.url and endpoints.database is None:
        raise CommandError(
            "db downgrade needs its database named: pass --url or set OUTBOXKIT_DATABASE_URL "
            "(it never falls back to the local stack's database)"
        )
    return endpoints.database_url(args.url)


def _without_password(url: Any) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def _steps(current: str | None, revision: str) -> list[Step]:
    """The revisions stepped down; an unknown REVISION, or one above the database's, is a usage
    error."""
    from migrations import runner
    from outboxkit.commands.errors import CommandError

    try:
        return runner.steps_down(current, revision)
    except runner.MigrationError as exc:
        raise CommandError(f"{exc}; `outboxkit db current` prints the database's revision") from exc


def _plan(
    shown: str, current: str | None, target: str | None, steps: Sequence[Step], keeps_log: bool
) -> list[str]:
    """What the downgrade does, for the operator to confirm (or --dry-run to print)."""
    lines = [
        f"db downgrade of {shown}",
        f"  from revision {current} to {target or 'base'}: {len(steps)} revision(s) undone, "
        "newest first, each dropping what it made:",
    ]
    lines += [f"    {s.revision}: {_first_sentence(s.doc)}" for s in steps]
    if target is None:
        lines.append(f"  base drops {EVERYTHING}")
    if not keeps_log:
        lines.append("  the operator action log is dropped too: this downgrade is not recorded")
    return lines


def _first_sentence(doc: str) -> str:
    sentence = doc.split(". ")[0].rstrip(".")
    return sentence if len(sentence) <= 110 else f"{sentence[:107]}..."


def _record(
    url: Any, who: str, shown: str, current: str | None, target: str | None, steps: Sequence[Step]
) -> None:
    from inbox import operations
    from outboxkit.kernel.engines import engine_for

    engine = engine_for(url, "once")
    try:
        operations.record_action(
            engine,
            who=who,
            command=DOWNGRADE,
            target=shown,
            detail={"from": current, "to": target, "revisions": [s.revision for s in steps]},
            count=len(steps),
        )
    finally:
        engine.dispose()


def add_parser(sub: SubParsers) -> None:
    actions = group(sub, "db", help="the framework's migrations")
    upgrade = command(actions, "upgrade", _upgrade, help="migrate the database up to a revision")
    upgrade.add_argument("--revision", default="head", help="the target revision")
    add_url(upgrade)
    downgrade = command(
        actions,
        "downgrade",
        _downgrade,
        help="migrate the database down to REVISION, dropping what the revisions above it made; "
        "prints the plan and asks first",
    )
    downgrade.add_argument(
        "revision",
        metavar="REVISION",
        help="the target revision, required: an id (db current prints the database's), -N "
        "(N revisions down) or base (every framework table dropped)",
    )
    confirm.add_options(downgrade)
    downgrade.add_argument(
        "--url",
        help="database URL (default: OUTBOXKIT_DATABASE_URL; never the local stack's)",
    )
    current = command(actions, "current", _current, help="print the database's revision")
    add_url(current)
    current.add_argument("--json", action="store_true", help="print the revisions as JSON")
