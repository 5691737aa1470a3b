"""Every python block of the documentation runs; the commands and the diagram it shows exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from outboxkit.cli import build_parser
from tests.doc_snippets import (
    ROOT,
    blocks,
    needs_stack,
    pages,
    python_blocks,
    run_page,
    runs_as_shell,
)

UNIT_PAGES = [
    p for p in pages() if python_blocks(p) and not needs_stack(p) and not runs_as_shell(p)
]
# Each shell-session page and the integration test that runs it.
SHELL_PAGES = {
    "README.md": "tests/integration/test_readme_quickstart.py",
    "docs/how-to/install.md": "tests/integration/test_wheel_install.py",
}
COMMAND = re.compile(r"\boutboxkit\s+([a-z][\w-]*)(?:\s+([a-z][\w|-]*))?")


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("page", UNIT_PAGES, ids=_name)
def test_python_blocks_run(page: Path) -> None:
    run_page(page)


def test_every_python_block_is_run_by_one_test() -> None:
    """No block skipped: each is on a unit page or a stack page, and none hides behind a fence
    spelled another way (```py, ```Python), which neither test would run."""
    from tests.integration.test_doc_snippets import STACK_PAGES

    for page in pages():
        text = page.read_text(encoding="utf-8")
        fences = re.findall(r"^[ ]*```[ ]*(py|python|python3|pycon|Python)\b", text, re.M)
        assert fences.count("python") == len(fences), (
            f"{_name(page)}: spell python fences ```python"
        )
        found = python_blocks(page)
        assert len(found) == len(fences), f"{_name(page)}: a python fence was not parsed"
        if found and not runs_as_shell(page):  # a shell page: its test in SHELL_PAGES
            assert (page in UNIT_PAGES) != (page in STACK_PAGES), _name(page)


def test_every_shell_page_has_its_test() -> None:
    shell = {_name(p) for p in pages() if runs_as_shell(p)}
    assert shell == set(SHELL_PAGES), "a page marked as a shell session needs its test"
    for page, test in SHELL_PAGES.items():
        assert page in (ROOT / test).read_text(encoding="utf-8"), f"{test} does not run {page}"


def test_getting_started_shows_the_readme_quickstart() -> None:
    """One source: getting-started includes the README's quickstart section, no copy of it."""
    page = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
    assert '--8<-- "README.md:quickstart"' in page
    assert not python_blocks(ROOT / "docs" / "getting-started.md")
    assert blocks(ROOT / "README.md", "quickstart")


def test_stack_pages_have_blocks() -> None:
    from tests.integration.test_doc_snippets import STACK_PAGES

    assert {_name(p) for p in STACK_PAGES} >= {
        "docs/how-to/add-outbox.md",
        "docs/concepts/outbox.md",
    }


def _choices(parser: object) -> dict[str, object]:
    import argparse

    assert isinstance(parser, argparse.ArgumentParser)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
        if action.choices and not action.option_strings:
            return {str(c): None for c in action.choices}
    return {}


def test_commands_in_bash_blocks_exist() -> None:
    shown = set()
    for page in pages():
        for block in blocks(page):
            if block.language not in ("bash", "sh", "shell"):
                continue
            for line in block.code.splitlines():
                code = line.split("#", 1)[0]
                for command, sub in COMMAND.findall(code):
                    shown.add((_name(page), command, sub))
    assert shown, "no outboxkit command found in any bash block"
    commands = _choices(build_parser())
    for page, command, sub in sorted(shown):
        assert command in commands, f"{page}: `outboxkit {command}` is not a command"
        subs = _choices(commands[command]) if commands[command] is not None else {}
        if subs and sub:
            for one in sub.split("|"):
                assert one in subs, f"{page}: `outboxkit {command} {one}` is not a sub-command"


def test_readme_diagram_is_the_source_file() -> None:
    source = (ROOT / "docs" / "flow.mmd").read_text(encoding="utf-8").strip()
    diagrams = [b.code.strip() for b in blocks(ROOT / "README.md") if b.language == "mermaid"]
    assert diagrams == [source], "README's mermaid block differs from docs/flow.mmd: copy it"


def test_readme_is_short_and_keeps_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    assert "./dev.sh demo" in readme and "./dev.sh test" in readme
