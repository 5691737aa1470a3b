"""`outboxkit dev bench publish`: the figure tables of README.md, docs/index.md and
docs/benchmarks.md, rendered from the benchmark results in docs/benchmarks/*.json.

Each page marks a generated block as ``<!-- figures:NAME -->`` ... ``<!-- /figures -->``; the
block's text is rendered from the results alone, so two pages cannot disagree, and
``--check`` (and the unit tests) fail when a page differs from what the results give."""

from __future__ import annotations

import argparse
import json
import re
import shutil
from pathlib import Path
from typing import Any

from outboxkit_workshop.bench.figures import RENDER, SECTIONS, Results, summary

ROOT = Path(__file__).resolve().parents[3]
DATA = Path("docs/benchmarks")  # the results the pages show, relative to the repository
PAGES = (Path("README.md"), Path("docs/index.md"), Path("docs/benchmarks.md"))
BENCHMARKS = PAGES[2]  # where a result's section (`figures.SECTIONS`) is added when missing
# Any name a result's file can have (digits too): a block whose result is missing is an error,
# never a block left as it was.
BLOCK = re.compile(r"(<!-- figures:([^\s>]+) -->\n)(.*?)(<!-- /figures -->)", re.S)
# A kernel release's local version names the machine it was built for: left out of the results.
HOST = re.compile(r"(Linux-\d+(?:\.\d+)*)-[^\"\s]+?(?=-(?:x86_64|aarch64|arm64))")


# -- pages ----------------------------------------------------------------------------------
def load(folder: Path) -> dict[str, dict[str, Any]]:
    """Every result in ``folder``, by name (the JSON file's stem)."""
    return {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}


def block(name: str, results: Results) -> str:
    """The markdown of the block ``name``: ``summary`` or a result's name."""
    if name == "summary":
        return summary(results)
    if name not in results or name not in RENDER:
        raise ValueError(f"no result {name!r} for a figures block: add {DATA}/{name}.json")
    return RENDER[name](results[name])


def render(text: str, results: Results) -> str:
    """``text`` with every figures block rendered again from ``results``."""

    def fill(m: re.Match[str]) -> str:
        return m.group(1) + "\n" + block(m.group(2), results) + "\n" + m.group(4)

    return BLOCK.sub(fill, text)


def with_sections(text: str, results: Results) -> str:
    """``text`` with the section of each result that has one (`figures.SECTIONS`) added at its
    end when the result is there and the page shows no block for it yet."""
    shown = {m.group(2) for m in BLOCK.finditer(text)}
    missing = [SECTIONS[name] for name in SECTIONS if name in results and name not in shown]
    return text + "".join(missing)


def stale(root: Path = ROOT, data: Path | None = None) -> list[Path]:
    """The pages whose figures differ from what the results give."""
    results = load(data or root / DATA)
    return [p for p in PAGES if (root / p).read_text() != render((root / p).read_text(), results)]


def publish(root: Path = ROOT, source: Path | None = None) -> list[Path]:
    """Copy a run's results and plots from ``source`` (when given) into docs/benchmarks/, then
    render every page's blocks again; returns the pages that changed."""
    data = root / DATA
    if source is not None:
        for found in sorted(source.glob("*.json")):
            text = HOST.sub(r"\1", found.read_text())
            (data / found.name).write_text(text)
            result = json.loads(text)
            for plot in result.get("plots", []):
                if (source / Path(plot).name).exists():
                    shutil.copy2(source / Path(plot).name, data / Path(plot).name)
    results = load(data)
    changed = []
    for page in PAGES:
        text = (root / page).read_text()
        new = render(with_sections(text, results) if page == BENCHMARKS else text, results)
        if new != text:
            (root / page).write_text(new)
            changed.append(page)
    return changed


def run(args: argparse.Namespace) -> int:
    """``outboxkit dev bench publish [--from DIR] [--check]``."""
    if args.check:
        found = stale()
        for page in found:
            print(f"{page}: figures differ from {DATA}/ (run `outboxkit dev bench publish`)")
        return 1 if found else 0
    for page in publish(source=args.source):
        print(f"wrote {page}")
    return 0
