"""The `outboxkit` command line: one command group per module of `outboxkit.commands`.

The operator commands (db, outbox, cdc, consume, inbox, audit, schemas) read
`outboxkit.settings.Settings` and find their endpoints through `outboxkit.endpoints`. Other
distributions add command groups through the ``outboxkit.commands`` entry point (the
repository's workshop adds `dev`: the local stack, the example saga, its campaigns and the
benchmarks); such a command names the settings it reads.

Building the parser imports argparse and the command modules only (`outboxkit --help` starts
fast); a command imports its libraries when it runs. The usual mistakes end in one line that
says the fix (`outboxkit.commands.errors`); --debug shows the traceback instead."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points
from typing import Any

from outboxkit.commands import errors
from outboxkit.parsers import HelpFormatter, Run, SettingsSource

DESCRIPTION = (
    "Exactly-once events between services: transactional outbox, Debezium, Kafka, Spark, inbox. "
    "The operator commands (db, outbox, cdc, consume, inbox, audit) take their endpoints from "
    "the OUTBOXKIT_* settings, else from the local stack's state file; schemas checks event "
    "contracts; new-service writes a new service from the template."
)
# Where installed distributions add command groups: each entry point names a module with
# `add_parser(sub)` (the repository's workshop adds `dev`).
COMMAND_GROUPS = "outboxkit.commands"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the `outboxkit` command."""
    from outboxkit import __version__
    from outboxkit.commands import (
        audit,
        cdc,
        consume,
        db,
        inbox,
        new_service,
        outbox,
        schemas,
    )

    parser = argparse.ArgumentParser(
        prog="outboxkit",
        description=DESCRIPTION,
        epilog=errors.exit_codes_text(),
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"outboxkit {__version__}")
    parser.add_argument(
        "--debug",
        action="store_true",
        help="show the traceback of an error instead of its one-line message (also: "
        "OUTBOXKIT_DEBUG=1)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for group in (db, outbox, cdc, consume, inbox, audit, schemas, new_service):
        group.add_parser(sub)
    for entry in sorted(entry_points(group=COMMAND_GROUPS), key=lambda e: e.name):
        entry.load().add_parser(sub)
    return parser


def load_settings(source: SettingsSource) -> Any:
    """The settings a command reads (``source``: see `outboxkit.parsers.command`); a bad value
    is a `CommandError` naming its environment variable."""
    from pydantic import ValidationError

    from outboxkit.settings import Settings

    settings_type = Settings if source is None else source()
    try:
        return settings_type()
    except ValidationError as exc:
        prefix = str(settings_type.model_config.get("env_prefix") or "")
        raise errors.bad_settings(exc, prefix) from exc


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `outboxkit` console script; returns its exit code (see
    `outboxkit.commands.errors.EXIT_CODES`)."""
    args = build_parser().parse_args(argv)
    debug = args.debug or os.environ.get("OUTBOXKIT_DEBUG", "") not in ("", "0")
    settings: Any = None
    try:
        settings = load_settings(getattr(args, "settings", None))
        run: Run = args.run
        return run(args, settings)
    except KeyboardInterrupt:
        return errors.INTERRUPTED
    except Exception as exc:
        known = errors.translate(exc, _fields(settings))
        if known is None and isinstance(exc, RuntimeError | ValueError | LookupError):
            known = (str(exc), errors.PROBLEM)
        if debug or known is None:
            raise
        message, code = known
        for line in message.splitlines():
            print(f"outboxkit: error: {line}", file=sys.stderr)
        return code


def _fields(settings: Any) -> dict[str, Any]:
    return dict(vars(settings)) if settings is not None else {}


if __name__ == "__main__":
    sys.exit(main())
