"""Every `--help` says what its options accept: the choices of each option, and for the options
that take a comma-separated list of names (bench scenarios, chaos fault kinds) every name."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from outboxkit.bench.cli import SCENARIOS
from outboxkit.cli import build_parser
from outboxkit.saga_harness import faults


def parsers(
    parser: argparse.ArgumentParser, path: str = "outboxkit"
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from parsers(sub, f"{path} {name}")


def test_every_choice_is_in_its_commands_help() -> None:
    missing = [
        f"{path}: {choice}"
        for path, parser in parsers(build_parser())
        for action in parser._actions
        if action.choices and not isinstance(action, argparse._SubParsersAction)
        for choice in action.choices
        if str(choice) not in parser.format_help()
    ]
    assert missing == []


def test_list_options_name_every_value_they_accept() -> None:
    helps = dict(parsers(build_parser()))
    bench, chaos = helps["outboxkit bench"].format_help(), helps["outboxkit chaos"].format_help()
    assert [s for s in SCENARIOS if s not in bench] == []
    assert [k.name for k in faults.KINDS if k.name not in chaos] == []
