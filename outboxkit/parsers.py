"""What the parsers of every `outboxkit` command share: help that shows each option's default,
and a command group whose actions are sub-commands with their own options.

Light on purpose: building the whole parser imports this, argparse and the command modules
only, so that `outboxkit --help` starts fast; the commands import their libraries when run."""

from __future__ import annotations

import argparse
import copy
import re
import textwrap
from collections.abc import Callable
from typing import Any, Final, Literal, TypeAlias

Run = Callable[[argparse.Namespace, Any], int]
SubParsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
# What a command reads: None for the operator settings (`outboxkit.settings.Settings`),
# NO_SETTINGS for none (the command runs with None: a bad setting cannot stop it), else a
# function returning the settings class (imported when the command runs, not when parsed).
NO_SETTINGS: Final = False
SettingsSource = Callable[[], type[Any]] | Literal[False] | None


class HelpFormatter(argparse.HelpFormatter):
    """Help text that ends with the option's default, unless the text already says it or the
    option has none (a flag off, or a value that is unset by default); a list default is shown
    comma-separated. The line breaks of a help, description or epilog are kept (a catalogue,
    one entry a line), each line wrapped to the terminal, an indented one under its text."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if (
            "default" in text
            or not action.option_strings
            # by identity: a default of 0 equals False, and must still be shown
            or any(action.default is unset for unset in (None, False, argparse.SUPPRESS))
        ):
            return text
        return f"{text} (default: %(default)s)"

    def _expand_help(self, action: argparse.Action) -> str:
        if isinstance(action.default, list | tuple):
            shown = ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in action.default)
            action = copy.copy(action)
            action.default = shown
        return super()._expand_help(action)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        filled = []
        for line in text.splitlines():
            words = line.lstrip()
            lead = indent + line[: len(line) - len(words)]
            hanging = lead + "    " if lead != indent else lead
            filled.append(
                textwrap.fill(words, width, initial_indent=lead, subsequent_indent=hanging)
            )
        return "\n".join(filled)

    def _split_lines(self, text: str, width: int) -> list[str]:
        lines: list[str] = []
        for line in text.splitlines():
            column = re.match(r"(\S.*?\s{2,})(\S.*)", line)  # "name    text": text aligned
            if column is None:
                lines += super()._split_lines(line, width)
            else:
                head = column.group(1)
                lines += textwrap.wrap(
                    column.group(2), width, initial_indent=head, subsequent_indent=" " * len(head)
                )
        return lines


def group(sub: SubParsers, name: str, *, help: str, description: str | None = None) -> SubParsers:
    """Add the command group ``name``; returns the sub-parsers its actions are added to."""
    parser = sub.add_parser(
        name, help=help, description=description or help, formatter_class=HelpFormatter
    )
    add_debug(parser)
    return parser.add_subparsers(dest="action", metavar="ACTION", required=True)


def command(
    sub: SubParsers,
    name: str,
    run: Run,
    *,
    help: str,
    description: str | None = None,
    settings: SettingsSource = None,
) -> argparse.ArgumentParser:
    """Add the (sub-)command ``name``, run by ``run(args, settings)``; ``settings`` gives the
    class of the settings it reads (None: the operator's, `outboxkit.settings.Settings`;
    `NO_SETTINGS`: none, and ``run`` gets None)."""
    parser = sub.add_parser(
        name, help=help, description=description or help, formatter_class=HelpFormatter
    )
    parser.set_defaults(run=run, settings=settings)
    add_debug(parser)
    return parser


def add_debug(parser: argparse.ArgumentParser) -> None:
    """--debug after a (sub-)command's name too (`outboxkit inbox status --debug`); SUPPRESS
    keeps the value given before it when it is not given here."""
    parser.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="show the traceback of an error instead of its one-line message",
    )


def add_url(parser: argparse.ArgumentParser) -> None:
    """The ``--url`` option of the commands that work on a database."""
    parser.add_argument(
        "--url", help="database URL (default: OUTBOXKIT_DATABASE_URL, then the local stack)"
    )
