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
from collections.abc import Callable, Iterator, Mapping, Sequence
from importlib.metadata import entry_points
from typing import Any

from outboxkit.commands import errors
from outboxkit.parsers import NO_SETTINGS, HelpFormatter, Run, SettingsSource

DESCRIPTION = (
    "Exactly-once events between services: transactional outbox, Debezium, Kafka, Spark, inbox. "
    "The operator commands (db, outbox, cdc, consume, inbox, audit) take their endpoints from "
    "the OUTBOXKIT_* settings, else from the local stack's state file; schemas checks event "
    "contracts; new-service writes a new service from the template."
)
# Where installed distributions add command groups: each entry point names a module with
# `add_parser(sub)` (the repository's workshop adds `dev`).
COMMAND_GROUPS = "outboxkit.commands"
PREFIX = "OUTBOXKIT_"
# The OUTBOXKIT_* variables read outside the settings classes.
OTHER_VARIABLES = (
    "OUTBOXKIT_DEBUG",
    "OUTBOXKIT_SPARK_MASTER",
    "OUTBOXKIT_OPERATOR",
    # Off switches of the consumers' Spark session (spark_consumers.session), to measure them.
    "OUTBOXKIT_SPARK_SPECULATION",
    "OUTBOXKIT_SPARK_FORKLESS_FS",
)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the `outboxkit` command."""
    from outboxkit import __version__
    from outboxkit.commands import (
        audit,
        cdc,
        completion,
        console,
        consume,
        db,
        doctor,
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
    for group in (db, outbox, cdc, consume, inbox, audit, console, doctor, schemas, new_service):
        group.add_parser(sub)
    for entry in sorted(entry_points(group=COMMAND_GROUPS), key=lambda e: e.name):
        entry.load().add_parser(sub)
    completion.add_parser(sub, build_parser)  # completes the whole tree, built again
    return parser


def load_settings(source: SettingsSource) -> Any:
    """The settings a command reads (``source``: see `outboxkit.parsers.command`; None for a
    command that reads none); a bad value is a `CommandError` naming its environment
    variable."""
    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    from outboxkit.settings import Settings

    if source is NO_SETTINGS:
        return None
    settings_type = Settings if source is None else source()
    try:
        return settings_type()
    except (ValidationError, SettingsError) as exc:
        raise errors.bad_settings(exc, settings_type) from exc


def unknown_variables(
    environ: Mapping[str, str], classes: Sequence[type[Any]], others: Sequence[str] = ()
) -> list[str]:
    """A warning per ``OUTBOXKIT_*`` variable of ``environ`` that no class of ``classes`` (nor
    ``others``) reads, naming the closest known one (a misspelling is ignored silently
    otherwise)."""
    from outboxkit.settings import closest, variables

    known = variables(classes) | {name.upper() for name in others}
    warnings = []
    for name in sorted(environ):
        if not name.upper().startswith(PREFIX) or name.upper() in known:
            continue
        guess = closest(name, known)
        hint = f"did you mean {guess}?" if guess else "no outboxkit setting is spelt like it"
        warnings.append(f"{name} is not an outboxkit setting ({hint})")
    return warnings


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `outboxkit` console script; returns its exit code (see
    `outboxkit.commands.errors.EXIT_CODES`)."""
    given = list(sys.argv[1:] if argv is None else argv)
    if given[:1] == ["dev"] and not any(
        e.name == "dev" for e in entry_points(group=COMMAND_GROUPS)
    ):
        print(
            "outboxkit: error: the `dev` commands (the local stack, the demo, the benchmarks) "
            "belong to outboxkit's repository, not to this install: run them in a clone "
            "(./dev.sh setup, then .venv/bin/outboxkit dev ...)",
            file=sys.stderr,
        )
        return errors.USAGE
    parser = build_parser()
    args = parser.parse_args(given)
    debug = args.debug or os.environ.get("OUTBOXKIT_DEBUG", "") not in ("", "0")
    settings: Any = None
    try:
        source: SettingsSource = getattr(args, "settings", None)
        for warning in _unknown_variables(parser, source):
            print(f"outboxkit: warning: {warning}", file=sys.stderr)
        settings = load_settings(source)
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


def _unknown_variables(parser: argparse.ArgumentParser, source: SettingsSource) -> list[str]:
    """The warnings of `unknown_variables` for the operator's settings and the command's; any
    left are checked against every command's settings (another command's, the dev stack's)."""
    if not any(name.upper().startswith(PREFIX) for name in os.environ):
        return []
    from outboxkit.settings import Settings

    classes: list[type[Any]] = [Settings, *([source()] if callable(source) else [])]
    warnings = unknown_variables(os.environ, classes, OTHER_VARIABLES)
    if not warnings:
        return []
    try:
        every = {s() for s in _settings_sources(parser)}
    except ImportError:  # a command group's settings that do not import: warn on what is known
        return warnings
    return unknown_variables(os.environ, [*classes, *every], OTHER_VARIABLES)


def _settings_sources(parser: argparse.ArgumentParser) -> Iterator[Callable[[], type[Any]]]:
    """The settings sources of every command under ``parser`` that names its own."""
    source = parser.get_default("settings")
    if callable(source):
        yield source
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                yield from _settings_sources(sub)


def _fields(settings: Any) -> dict[str, Any]:
    return dict(vars(settings)) if settings is not None else {}


if __name__ == "__main__":
    sys.exit(main())
