"""What the commands that destroy, rewind or redrive state share: a named target, the plan
printed before anything changes, ``--dry-run`` (the plan only), a confirmation asked on a
terminal (``--yes`` for scripts; refused elsewhere without it), and the operator's name the
action log records.

Light at import, as every command module (`outboxkit --help` imports them)."""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from collections.abc import Sequence

OPERATOR_VARIABLE = "OUTBOXKIT_OPERATOR"


def add_options(parser: argparse.ArgumentParser, *, ask: bool = True) -> None:
    """``--dry-run``, and with ``ask`` (a command that destroys or rewinds) ``--yes``."""
    parser.add_argument(
        "--dry-run", action="store_true", help="print what would be done, change nothing"
    )
    if ask:
        parser.add_argument(
            "--yes",
            action="store_true",
            help="do it without asking (scripts); without it a terminal is asked, and a stdin "
            "that is not a terminal is refused",
        )


def go_ahead(args: argparse.Namespace, command: str, plan: Sequence[str]) -> bool:
    """Print ``plan``; True when ``command`` may change state: not ``--dry-run``, and ``--yes``
    given or "y" answered on a terminal. Without ``--yes`` on a stdin that is not a terminal,
    or when the answer is not yes, a `CommandError` (nothing changed)."""
    from outboxkit.commands.errors import PROBLEM, CommandError

    for line in plan:
        print(line)
    if args.dry_run:
        print("dry run: nothing changed")
        return False
    if getattr(args, "yes", False):
        return True
    if not sys.stdin.isatty():
        raise CommandError(
            f"{command} changes state and stdin is not a terminal to confirm on: add --yes "
            "(or --dry-run to print the plan only); nothing changed"
        )
    try:
        answer = input(f"{command}: go ahead? [y/N] ")
    except EOFError:
        answer = ""
    if answer.strip().lower() not in ("y", "yes"):
        raise CommandError(f"{command} not confirmed: nothing changed", PROBLEM)
    return True


def operator() -> str:
    """Who runs the command, as the action log records it: ``OUTBOXKIT_OPERATOR`` when set (a
    person's name where the OS user is shared, e.g. in a pod), else the OS user."""
    return os.environ.get(OPERATOR_VARIABLE, "").strip() or getpass.getuser()
