"""The documentation site: `mkdocs build --strict` passes (no warning, broken link, missing page
or missing reference), and the reference generated from the code covers it whole: every name in
each package's ``__all__``, every CLI command, sub-command and argument, every field of every
settings class of the packages."""

from __future__ import annotations

import argparse
import html
import importlib
import os
import pkgutil
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from pydantic import BaseModel, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from tests.unit.test_layers import MAY_IMPORT

ROOT = Path(__file__).resolve().parents[2]
HOOKS = ROOT / "docs" / "hooks"
# The repository's Python packages, where settings classes are looked for.
PACKAGES = tuple(MAY_IMPORT)  # every package of the repository


@pytest.fixture(scope="module")
def hooks() -> Iterator[dict[str, ModuleType]]:
    """The reference generators of docs/hooks, imported as the MkDocs hook imports them."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(HOOKS))
        names = ("api_reference", "cli_reference", "settings_reference")
        yield {name: importlib.import_module(name) for name in names}


def mkdocs_build(out: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """``mkdocs build`` of the repository's site into ``out``."""
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", *flags, "-f", "mkdocs.yml", "-d", str(out)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def strict_build(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The site built once with ``mkdocs build --strict``, and the build's log. When the strict
    build fails, the site is built again without --strict, so that the reference checks still
    say what they find (test_site_builds_strictly reports the failure)."""
    out = tmp_path_factory.mktemp("site")
    result = mkdocs_build(out, "--strict")
    log = result.stdout + result.stderr
    warnings = [line for line in log.splitlines() if line.startswith(("WARNING", "ERROR"))]
    if result.returncode != 0 or warnings:
        assert mkdocs_build(out).returncode == 0, log
        return out, "\n".join(warnings) or log
    return out, ""


@pytest.fixture(scope="module")
def site(strict_build: tuple[Path, str]) -> Path:
    """The built site's folder."""
    return strict_build[0]


def page_html(site: Path, page: str) -> str:
    """A built page's HTML (``page`` as in the nav, e.g. ``reference/cli.md``)."""
    return (site / page.removesuffix(".md") / "index.html").read_text()


def test_site_builds_strictly(strict_build: tuple[Path, str]) -> None:
    site, problems = strict_build
    assert not problems, f"mkdocs build --strict failed:\n{problems}"
    assert (site / "index.html").is_file()
    assert (site / "reference" / "settings" / "index.html").is_file()


def test_api_reference_documents_exactly_the_public_names(
    site: Path, hooks: dict[str, ModuleType]
) -> None:
    api = hooks["api_reference"]
    for package in api.PACKAGES:
        ids = set(re.findall(r'id="([^"]+)"', page_html(site, f"reference/api/{package}.md")))
        names = importlib.import_module(package).__all__
        missing = [n for n in names if api.anchor(package, n) not in ids]
        assert not missing, f"{package}: {missing} from __all__ not in its API page"
        # Top-level entries are package.Name; their members (package.Name.method) are not.
        top = {i.split(".", 1)[1] for i in ids if i.count(".") == 1 and i.startswith(f"{package}.")}
        extra = top - set(names)
        assert not extra, f"{package}: {sorted(extra)} documented but not in __all__"


def commands(
    parser: argparse.ArgumentParser, words: tuple[str, ...]
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every command under ``parser`` with its words."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*words, name), sub
                yield from commands(sub, (*words, name))


def test_cli_reference_documents_every_command_and_argument(site: Path) -> None:
    from outboxkit.cli import build_parser

    page = html.unescape(re.sub(r"<[^>]+>", "", page_html(site, "reference/cli.md")))
    found = list(commands(build_parser(), ("outboxkit",)))
    assert len(found) >= 12
    for words, parser in found:
        assert " ".join(words) in page, f"{' '.join(words)} missing from the CLI reference"
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            for option in action.option_strings:
                assert option in page, f"{' '.join(words)} {option} missing"
            for choice in action.choices or ():
                # a positional's choices are sub-commands; an option's, the values it takes
                named = str(choice) if action.option_strings else " ".join((*words, str(choice)))
                assert named in page, f"{' '.join(words)}: {named} missing from the CLI reference"
            assert action.help, f"{' '.join(words)} {action.dest}: add help text to its parser"
            assert html.unescape(action.help.split("\n")[0].strip()) in page


def settings_classes() -> set[str]:
    """Every BaseSettings subclass the packages define, by its import path. Alembic's env
    modules run only under Alembic and are not imported."""
    for package in PACKAGES:
        module = importlib.import_module(package)
        for info in pkgutil.walk_packages(module.__path__, f"{package}."):
            if not info.name.endswith(".env"):
                importlib.import_module(info.name)

    def subclasses(cls: type[Any]) -> Iterator[type[Any]]:
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    return {
        f"{c.__module__}.{c.__qualname__}"
        for c in subclasses(BaseSettings)
        if c.__module__.split(".")[0] in PACKAGES and "<locals>" not in c.__qualname__
    }


def test_every_settings_class_is_in_the_reference(hooks: dict[str, ModuleType]) -> None:
    documented = {d.path for d in hooks["settings_reference"].SETTINGS}
    found = settings_classes()
    assert len(found) >= 7
    missing = found - documented
    assert not missing, f"add {sorted(missing)} to SETTINGS in docs/hooks/settings_reference.py"
    # A model composed into settings (e.g. OutboxSettings) is documented too.
    for documented_class in hooks["settings_reference"].SETTINGS:
        for name, field in documented_class.load().model_fields.items():
            if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
                path = f"{field.annotation.__module__}.{field.annotation.__qualname__}"
                assert path in documented, f"{documented_class.path}.{name}: document {path}"


def test_settings_reference_documents_every_field(site: Path, hooks: dict[str, ModuleType]) -> None:
    page = page_html(site, "reference/settings.md")
    for documented in hooks["settings_reference"].SETTINGS:
        start = page.index(f'id="{documented.name.lower()}"')
        end = page.find("<h2", start)
        section = page[start : end if end > 0 else len(page)]
        for name, field in documented.load().model_fields.items():
            assert f"<code>{name}</code>" in section, f"{documented.path}.{name} missing"
            assert field.description, f"{documented.path}.{name}: add Field(description=...)"


def test_settings_reference_masks_secret_defaults(hooks: dict[str, ModuleType]) -> None:
    reference = hooks["settings_reference"]

    class Credentials(BaseSettings):
        """Credentials of a test service."""

        model_config = SettingsConfigDict(env_prefix="TEST_")

        password: SecretStr = Field(default=SecretStr("hunter2"), description="the password")
        api_token: str = Field(default="tok-123", description="an API token")
        password_file: Path = Field(default=Path("/run/secrets/pw"), description="its file")

    text = "\n".join(reference.section(reference.Documented("test.Credentials"), Credentials))
    assert "hunter2" not in text and "tok-123" not in text
    assert text.count(reference.MASKED) == 2
    assert "/run/secrets/pw" in text  # a file's path is no secret
    assert "`TEST_PASSWORD`" in text


def test_mermaid_fences_render_as_diagrams() -> None:
    import markdown
    from mkdocs.config import load_config

    config = load_config(str(ROOT / "mkdocs.yml"))
    md = markdown.Markdown(
        extensions=config["markdown_extensions"], extension_configs=config["mdx_configs"]
    )
    out = md.convert("```mermaid\ngraph LR\n  outbox --> kafka\n```\n")
    assert '<pre class="mermaid"><code>graph LR' in out


def test_benchmark_plots_are_shown_on_benchmarks(site: Path) -> None:
    page = page_html(site, "benchmarks.md")
    plots = sorted(p.name for p in (ROOT / "docs" / "benchmarks").glob("*.png"))
    assert plots
    # benchmarks.md is served at benchmarks/, beside its plots
    unshown = [p for p in plots if f'src="{p}"' not in page]
    assert not unshown, f"benchmarks.md shows no image of docs/benchmarks/ for {unshown}"
