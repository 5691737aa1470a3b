"""The CLI reference, generated from the `outboxkit` argument parser: every command and
sub-command with its usage, arguments, choices and defaults, and the command's exit codes."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import cast

from markdown_text import cell, code, table

USAGE_WIDTH = 88


def commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser, str]]:
    """Every command under ``parser``, depth first: its words, its parser and its one-line help."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield (*path, name), sub, helps.get(name, "")
                yield from commands(sub, (*path, name))


def actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The arguments a reader types (help, version and sub-command groups left out)."""
    skipped = (argparse._HelpAction, argparse._SubParsersAction)
    return [a for a in parser._actions if not isinstance(a, skipped)]


def usage(parser: argparse.ArgumentParser) -> str:
    """The parser's usage line, wrapped at a fixed width whatever the terminal."""
    formatter_class = cast(type[argparse.HelpFormatter], parser.formatter_class)
    formatter = formatter_class(prog=parser.prog, width=USAGE_WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def help_text(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """An argument's help with its ``%(default)s``-style fields filled in."""
    if not action.help or action.help == argparse.SUPPRESS:
        raise ValueError(f"{parser.prog} {action.option_strings or action.dest}: no help text")
    params = {k: v for k, v in vars(action).items() if v is not argparse.SUPPRESS}
    params["prog"] = parser.prog
    return action.help % params


def default_text(action: argparse.Action) -> str:
    """The default a reader gets by leaving the argument out; empty where there is none."""
    value = action.default
    if value is None or value is argparse.SUPPRESS or action.nargs == 0:
        return ""
    if isinstance(value, list | tuple):
        return code(",".join(str(v) for v in value))
    return code(str(value))


def argument(action: argparse.Action) -> str:
    """How the argument is written: its option strings and value, or its positional name."""
    if not action.option_strings:
        name = action.metavar if isinstance(action.metavar, str) else action.dest
        return code(name)
    value = ""
    if action.nargs != 0:
        metavar = action.metavar if isinstance(action.metavar, str) else action.dest.upper()
        value = f" {metavar}"
        if action.nargs in ("*", "+"):
            value += " ..."
    return ", ".join(code(f"{option}{value}") for option in action.option_strings)


def choices_text(action: argparse.Action) -> str:
    """The values an argument accepts, where it names them."""
    if not action.choices:
        return ""
    return ", ".join(code(str(c)) for c in action.choices)


def section(words: tuple[str, ...], parser: argparse.ArgumentParser, summary: str) -> list[str]:
    """One command's heading, summary, usage and arguments."""
    level = "#" * min(len(words), 4)
    lines = [f"{level} {' '.join(words)}", ""]
    if summary:
        lines += [cell(summary), ""]
    if parser.description and parser.description != summary:
        lines += [cell(parser.description), ""]
    lines += ["```text", usage(parser), "```", ""]
    positional = [a for a in actions(parser) if not a.option_strings and a.choices]
    for action in positional:
        subcommands = ", ".join(code(f"{' '.join(words)} {c}") for c in action.choices or ())
        lines += [f"Sub-commands: {subcommands}.", ""]
    rows = [
        (argument(a), cell(help_text(parser, a)), choices_text(a), default_text(a))
        for a in actions(parser)
    ]
    if rows:
        lines += [*table(("Argument", "Description", "Choices", "Default"), rows), ""]
    return lines


def exit_codes() -> list[str]:
    """The exit codes every command shares (`outboxkit.commands.errors.EXIT_CODES`)."""
    from outboxkit.commands.errors import EXIT_CODES

    rows = [(code(str(number)), cell(meaning)) for number, meaning in EXIT_CODES.items()]
    return ["## Exit codes", "", *table(("Code", "Meaning"), rows), ""]


def page(parser: argparse.ArgumentParser) -> str:
    """The whole CLI reference page for ``parser``."""
    lines = [
        f"# `{parser.prog}` command line",
        "",
        "Generated from the command's argument parser when the site is built; "
        f"`{parser.prog} COMMAND --help` prints the same.",
        "",
    ]
    lines += section((parser.prog,), parser, parser.description or "")[2:]  # no heading
    lines += exit_codes()
    for words, sub, summary in commands(parser, (parser.prog,)):
        lines += section(words, sub, summary)
    return "\n".join(lines)
