"""`outboxkit completion bash`: the script bash loads completes commands and options from the
parser itself, at any depth, so a new command or option needs no edit to it."""

from __future__ import annotations

import contextlib
import io
import subprocess

import pytest

from outboxkit.cli import build_parser, main
from outboxkit.commands.completion import words


@pytest.fixture(scope="module")
def script() -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["completion", "bash"]) == 0
    return out.getvalue()


def complete(script: str, *typed: str) -> list[str]:
    """What bash offers after ``outboxkit TYPED...`` (the last word being completed)."""
    words_ = " ".join(["outboxkit", *typed])
    run = f"{script}\nCOMP_WORDS=({words_}); COMP_CWORD={len(typed)}; _outboxkit_complete\n"
    run += 'printf "%s\\n" "${COMPREPLY[@]}"'
    done = subprocess.run(["bash", "-c", run], capture_output=True, text=True, check=True)
    return sorted(done.stdout.split())


def test_commands_actions_and_options_complete_at_every_depth(script: str) -> None:
    assert complete(script, "do") == ["doctor"]
    assert complete(script, "inbox", "re") == ["rebase", "redrive", "retry", "rewind"]
    assert complete(script, "db", "downgrade", "--d") == ["--debug", "--dry-run"]
    # an option's value between the words does not lose the path
    assert "--partition" in complete(script, "inbox", "--debug", "rewind", "--p")


def test_every_command_of_the_parser_is_in_the_script(script: str) -> None:
    for path, after in words(build_parser()):
        if path:
            assert f" {path} " in script or f" {path}'" in script, path
        assert all(word in script for word in after), path
