"""The documentation's code blocks, from README.md and docs/, run as a user would paste them.

Convention: the ``python`` blocks of one page run in order, in one namespace, in a fresh
interpreter. A page with the comment ``<!-- snippets: stack -->`` needs the real stack: its
blocks read ``DATABASE_URL``, ``KAFKA_BOOTSTRAP_SERVERS`` and ``CONNECT_URL`` from the
environment and run in the integration test; every other page's blocks need nothing running and
run in the unit test. A page with ``<!-- snippets: wheel -->`` (run from an installed wheel) or
``<!-- snippets: shell -->`` (run from the repository's venv) is a shell session
(`shell_script`): its bash blocks in order, each python block with a ``title="file"`` written to
that file first; on a page with a ``--8<-- [start:NAME]`` ... ``--8<-- [end:NAME]`` section (the
markers pymdownx.snippets includes a section by), only that section's blocks."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STACK_MARK = "<!-- snippets: stack -->"
WHEEL_MARK = "<!-- snippets: wheel -->"
SHELL_MARK = "<!-- snippets: shell -->"
TITLE = re.compile(r'title="([^"]+)"')
FENCE = re.compile(
    r"^(?P<indent>[ ]*)```(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```[ ]*$", re.M | re.S
)

# Each block is compiled with its page and line as the file name, so a failure names them.
_RUNNER = """
import json, sys
namespace = {"__name__": "__main__"}
for where, code in json.load(sys.stdin):
    exec(compile(code, where, "exec"), namespace)
"""


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: str
    line: int
    language: str
    code: str
    title: str | None = None


def pages() -> list[Path]:
    """README.md and every markdown page under docs/ (the reference is generated: not files)."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def section(page: Path, name: str) -> tuple[int, int]:
    """Where section ``name`` of the page is: the offsets of its start and end markers."""
    text = page.read_text(encoding="utf-8")
    start = re.search(rf"--8<-- \[start:{re.escape(name)}\]", text)
    end = re.search(rf"--8<-- \[end:{re.escape(name)}\]", text)
    assert start and end and start.end() < end.start(), f"{page.name}: no section {name!r}"
    return start.end(), end.start()


def blocks(page: Path, within: str | None = None) -> list[Block]:
    """The page's fenced blocks, in order (``within``: section ``within``'s only)."""
    text = page.read_text(encoding="utf-8")
    name = page.relative_to(ROOT).as_posix()
    begin, end = section(page, within) if within else (0, len(text))
    found = []
    for match in FENCE.finditer(text, begin, end):
        indent = len(match["indent"])
        code = "\n".join(line[indent:] for line in match["body"].splitlines())
        line = text.count("\n", 0, match.start()) + 1
        info = match["info"].strip()
        title = TITLE.search(info)
        found.append(Block(name, line, info.split(" ")[0], code, title[1] if title else None))
    return found


def python_blocks(page: Path) -> list[Block]:
    return [b for b in blocks(page) if b.language == "python"]


def runs_from_wheel(page: Path) -> bool:
    return WHEEL_MARK in page.read_text(encoding="utf-8")


def runs_as_shell(page: Path) -> bool:
    """A shell session's page: run by `shell_script` (from a wheel or from the repository)."""
    text = page.read_text(encoding="utf-8")
    return WHEEL_MARK in text or SHELL_MARK in text


def shell_script(
    page: Path,
    settings: dict[str, str],
    substitute: dict[str, str],
    *,
    within: str | None = None,
    isolation: dict[str, str] | None = None,
) -> str:
    """The page (section ``within``'s blocks only, when given) as one bash script: python
    blocks with a title written to their files, bash blocks in order; the block titled
    ``settings.sh`` replaced by ``settings`` (which must set exactly the names it exports) and
    ``isolation`` (names the page leaves at their defaults, which a test sets to its own), each
    ``substitute`` pattern (a regex) replaced in the rest."""
    parts = ["set -euo pipefail"]
    found = dict.fromkeys(substitute, 0)
    for block in blocks(page, within):
        if block.language == "python" and block.title:
            parts.append(f"cat > {block.title} <<'OUTBOXKIT_EOF'\n{block.code}\nOUTBOXKIT_EOF")
        elif block.language == "bash" and block.title == "settings.sh":
            exported = set(re.findall(r"\b([A-Z][A-Z0-9_]*)=", block.code))
            assert exported == set(settings), f"settings differ: {exported ^ set(settings)}"
            assert not exported & set(isolation or {}), "isolation names a setting of the page"
            given = {**settings, **(isolation or {})}
            parts += [f"export {name}={shlex.quote(value)}" for name, value in given.items()]
        elif block.language == "bash":
            code = block.code
            for pattern, replacement in substitute.items():
                code, count = re.subn(pattern, lambda _, r=replacement: r, code)
                found[pattern] += count
            parts.append(f"# {block.page}:{block.line}\n{code}")
    assert all(found.values()), f"{page.name}: not found: {[p for p, n in found.items() if not n]}"
    return "\n".join(parts) + "\n"


def needs_stack(page: Path) -> bool:
    return STACK_MARK in page.read_text(encoding="utf-8")


def run_page(page: Path, env: dict[str, str] | None = None, timeout: float = 300) -> None:
    """Run the page's python blocks in order in one namespace; fail with the output."""
    todo = [(f"{b.page}:{b.line}", b.code) for b in python_blocks(page)]
    environment = {**os.environ, **(env or {})}
    environment["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), environment.get("PYTHONPATH")) if p
    )
    done = subprocess.run(
        [sys.executable, "-c", _RUNNER],
        input=json.dumps(todo),
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=environment,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"{page.name}: a python block failed\n{done.stdout}\n{done.stderr}"
