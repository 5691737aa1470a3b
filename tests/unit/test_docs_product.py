"""The docs speak of the product: the figures on README.md, docs/index.md and
docs/benchmarks.md are what `outboxkit dev bench publish` renders from docs/benchmarks/*.json, and
no page, changelog entry, docstring or comment speaks of how the work was done (issue numbers,
build machines, before/after runs, experiment folders)."""

from __future__ import annotations

import ast
import difflib
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

from outboxkit_workshop.bench import publish
from tests.unit.test_layers import MAY_IMPORT

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = tuple(MAY_IMPORT)  # every package of the repository
# Words of the work, not of the product. Each is narrow enough that the product's own words
# pass: "this change's LSN" (a Debezium change event), "the fix when it fails" (a diagnosis),
# "load averages before and after" (a measurement's window), "dbz#2004" (an upstream report).
WORK_WORDS = {
    "an issue number": re.compile(r"(?i)\bissues? #?\d+|\bissue \d+'s\b"),
    "an issue reference": re.compile(r"(?<![\w/&#.-])#\d+\b"),
    "a build machine's name": re.compile(r"(?i)\bfc-v\d+\b"),
    "the final code": re.compile(r"(?i)\b(on )?the final code\b"),
    "a slower or faster machine": re.compile(r"(?i)\b(slower|faster) machine\b"),
    "a change's before and after": re.compile(
        r"(?i)\b(before|after|since) (this|the) (change|fix)\b|\b(with|without) this change\b"
        r"|\bbefore/after (this|the) change\b|\bbefore and after\s*$"
    ),
    "an A/B run": re.compile(r"\bA/B\b"),
    "an experiment": re.compile(r"(?i)\bexperiments?\b"),
    "an experiment folder": re.compile(r"docs/bench/|\]\((\.\./)*bench/"),
    "an issue's targets": re.compile(r"(?i)\b(issue|ticket)( #?\d+)?'s targets?\b"),
}


def pages() -> list[Path]:
    """Every page of the site, and the README and changelog."""
    return [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]


def comments_and_docstrings(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of every comment and docstring in a Python file."""
    source = path.read_text(encoding="utf-8")
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None and node.body:
                first = node.body[0].lineno
                for offset, line in enumerate(doc.splitlines()):
                    yield first + offset, line


def work_words(text: str) -> list[str]:
    """The names of the work-process words found in ``text``."""
    return [name for name, pattern in WORK_WORDS.items() if pattern.search(text)]


def test_figures_on_the_pages_are_the_results() -> None:
    results = publish.load(ROOT / publish.DATA)
    assert results, f"no results in {publish.DATA}"
    for page in publish.PAGES:
        text = (ROOT / page).read_text(encoding="utf-8")
        assert publish.BLOCK.search(text), f"{page} has no figures block"
        rendered = publish.render(text, results)
        diff = "".join(
            difflib.unified_diff(
                text.splitlines(keepends=True), rendered.splitlines(keepends=True), str(page)
            )
        )
        rerun = "run `outboxkit dev bench publish`"
        assert not diff, f"{page} differs from its results: {rerun}\n{diff}"


def test_every_result_has_its_block_on_benchmarks() -> None:
    text = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    shown = {m.group(2) for m in publish.BLOCK.finditer(text)}
    results = {p.stem for p in (ROOT / publish.DATA).glob("*.json")}
    assert results <= shown, f"results not on docs/benchmarks.md: {sorted(results - shown)}"


def test_a_block_without_its_result_is_refused() -> None:
    with pytest.raises(ValueError, match="no result 'missing'"):
        publish.render("<!-- figures:missing -->\n<!-- /figures -->\n", {})
    # Whatever its name holds: a digit or an underscore does not leave a block unrendered.
    with pytest.raises(ValueError, match="no result 'chaos_freeze-2'"):
        publish.render("<!-- figures:chaos_freeze-2 -->\n<!-- /figures -->\n", {})


def test_pages_speak_of_the_product() -> None:
    found = [
        f"{page.relative_to(ROOT)}:{n}: {', '.join(words)}: {line.strip()}"
        for page in pages()
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        if (words := work_words(line))
    ]
    assert not found, "work-process words in the docs:\n" + "\n".join(found)


def test_comments_and_docstrings_speak_of_the_product() -> None:
    files = [p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))]
    assert files
    found = [
        f"{path.relative_to(ROOT)}:{n}: {', '.join(words)}: {text.strip()}"
        for path in files
        for n, text in comments_and_docstrings(path)
        if (words := work_words(text))
    ]
    assert not found, "work-process words in comments or docstrings:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("Issue 27's targets: where each stands", ["an issue number", "an issue's targets"]),
        ("as asked in #27", ["an issue reference"]),
        ("measured on fc-v782", ["a build machine's name"]),
        ("then 0.88 on the final code", ["the final code"]),
        ("the slower machine's latest runs", ["a slower or faster machine"]),
        ("p99 went down after this change", ["a change's before and after"]),
        ("three A/B runs", ["an A/B run"]),
        ("see [runs](bench/sink-arrow-headers/README.md)", ["an experiment folder"]),
        ("the `docs/bench/outbox-cursor` experiment", ["an experiment", "an experiment folder"]),
        ("`sequence`: [commit LSN, this change's LSN]", []),
        ("each with the fix when it fails", []),
        ("load averages before and after, the share", []),
        ("an open report (dbz#2004)", []),
        ("[Operate](how-to/operate.md#the-fault-campaign)", []),
        ("a/b testing of paths like a/b/c", []),
    ],
)
def test_work_words(text: str, words: list[str]) -> None:
    assert work_words(text) == words


def _shop_module(page: Path, within: str | None = None) -> list[str]:
    """The page's ``shop.py`` block, its comments and blank lines left out."""
    from tests.doc_snippets import blocks

    (code,) = [b.code for b in blocks(page, within) if b.title == "shop.py"]
    lines = (re.sub(r"\s+#.*$", "", line).rstrip() for line in code.splitlines())
    return [line for line in lines if line and not line.lstrip().startswith("#")]


def test_the_readme_quickstart_and_the_install_page_write_the_same_service() -> None:
    # One door: the short form and the long form teach the same code and settings prefix.
    readme = _shop_module(ROOT / "README.md", "quickstart")
    page = _shop_module(ROOT / "docs" / "how-to" / "install.md")
    assert readme == page
