"""Every `--help` says what its options accept: the choices of each option, every default, and
for the options that take a comma-separated list of names (bench scenarios, chaos fault kinds)
every name; each action takes only its own options; and `--help` stays light to import."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterator

import pytest

from outboxkit.cli import build_parser
from outboxkit.parsers import HelpFormatter
from outboxkit_workshop.bench.cli import SCENARIOS
from outboxkit_workshop.saga_harness import faults
from spark_consumers.job import DEFAULT_TRIGGER_SECONDS


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
    bench, chaos = (
        helps["outboxkit dev bench"].format_help(),
        helps["outboxkit dev chaos"].format_help(),
    )
    assert [s for s in SCENARIOS if s not in bench] == []
    assert [k.name for k in faults.KINDS if k.name not in chaos] == []


def test_every_option_shows_its_default() -> None:
    """An option with a default names it in its help ("(default: ...)" or its own words)."""
    silent = [
        f"{path} {'/'.join(action.option_strings)}"
        for path, parser in parsers(build_parser())
        for action in parser._actions
        if action.option_strings
        and not any(action.default is v for v in (None, False, argparse.SUPPRESS))
        and "default" not in parser._get_formatter()._expand_help(action)
    ]
    assert silent == []
    consume = dict(parsers(build_parser()))["outboxkit consume"].format_help()
    assert f"(default: {DEFAULT_TRIGGER_SECONDS})" in consume  # the value the driver uses


def test_a_default_of_zero_is_shown() -> None:
    # `inbox rewind --partition` was 0 by default, and its help never said so.
    parser = argparse.ArgumentParser(formatter_class=HelpFormatter)
    parser.add_argument("--partition", type=int, default=0, help="the partition")
    assert "(default: 0)" in parser.format_help()


def test_every_parser_uses_the_help_formatter() -> None:
    assert [
        p for p, parser in parsers(build_parser()) if parser.formatter_class is not HelpFormatter
    ] == []


@pytest.mark.parametrize(
    "argv",
    [
        ["dev", "stack", "status", "--keep-data"],
        ["inbox", "status", "--reason", "why"],
        ["inbox", "parked", "--offset", "3"],
        ["cdc", "preflight", "--max-bytes", "9"],
        ["cdc", "restart", "--interval", "1"],
        ["db", "current", "--revision", "head"],
        ["db", "upgrade", "--yes"],
        ["inbox", "status", "--dry-run"],
        ["dev", "saga", "stop", "--all"],
        ["dev", "saga", "prepare", "orders"],
    ],
)
def test_an_action_refuses_another_actions_options(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as refused:
        build_parser().parse_args(argv)
    assert refused.value.code == 2
    assert "unrecognized arguments" in capsys.readouterr().err


def test_a_missing_required_option_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    rewind = ["inbox", "rewind", "--consumer", "c", "--topic", "t", "--offset", "1"]
    for argv in (
        ["inbox", "skip", "--id", "1"],
        ["schemas", "check"],
        ["inbox", "redrive"],
        ["db", "downgrade"],  # REVISION: no default
        rewind,  # --partition: no default
    ):
        with pytest.raises(SystemExit) as refused:
            build_parser().parse_args(argv)
        assert refused.value.code == 2
        assert "the following arguments are required" in capsys.readouterr().err


def test_the_top_level_help_imports_no_library() -> None:
    """Building the parser imports argparse and the command modules only: `outboxkit --help`
    starts without SQLAlchemy, pydantic or confluent-kafka."""
    script = (
        "import contextlib, io, sys\n"
        "from outboxkit.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    main(['--help'])\n"
        "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout.split()
    heavy = ("sqlalchemy", "pydantic", "pydantic_settings", "confluent_kafka", "rich", "httpx")
    assert [m for m in heavy if m in loaded] == []


def test_outboxkit_consume_and_the_spark_submit_driver_take_the_same_options() -> None:
    # One consumer driver (spark_consumers.driver) behind two parsers: the CLI's stays light
    # (no import of the package), spark-submit's ships in the wheel; their options may not drift.
    from spark_consumers.submit import parser as submit_parser

    def options(parser: argparse.ArgumentParser) -> set[str]:
        return {o for a in parser._actions for o in a.option_strings} - {"-h", "--help"}

    consume = next(
        sub
        for action in build_parser()._actions
        if isinstance(action, argparse._SubParsersAction)
        for name, sub in action.choices.items()
        if name == "consume"
    )
    assert options(submit_parser()) - {"--path"} == options(consume) - {"--debug"}
