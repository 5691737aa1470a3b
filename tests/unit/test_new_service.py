"""`outboxkit new-service`: the folder it writes, the names it refuses, that it never overwrites,
and that what it generates compiles, passes ruff and mypy strict and passes its own unit tests."""

from __future__ import annotations

import compileall
import os
import subprocess
import sys
from pathlib import Path

import pytest

from outboxkit.cli import main
from outboxkit.commands.new_service import TOKEN, template_files

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
FILES = {
    "README.md",
    "pyproject.toml",
    "billing/__init__.py",
    "billing/app.py",
    "billing/consumer.py",
    "billing/contracts.py",
    "billing/migrate.py",
    "billing/serve.py",
    "billing/settings.py",
    "billing/tables.py",
    "billing/migrations/env.py",
    "billing/migrations/script.py.mako",
    "billing/migrations/versions/0001_billing.py",
    "tests/test_unit.py",
    "tests/test_integration.py",
}


def generate(parent: Path, *args: str) -> int:
    return main(["new-service", *args, "--dir", str(parent)])


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def billing(tmp_path_factory: pytest.TempPathFactory) -> Path:
    parent = tmp_path_factory.mktemp("services")
    assert generate(parent, "billing", "--consumes", "orders_feed") == 0
    return parent / "billing"


def test_the_folder_holds_the_service_its_migrations_tests_and_readme(billing: Path) -> None:
    assert set(snapshot(billing)) == FILES
    for text in snapshot(billing).values():
        assert not TOKEN.search(text.decode()), "a template token was left unreplaced"
    app = (billing / "billing/app.py").read_text()
    assert "from service_template import" in app and "uow.publish_event(ItemCreated(" in app
    contracts = (billing / "billing/contracts.py").read_text()
    assert 'event_type = "BillingItemCreated"' in contracts
    assert 'event_type = "OrdersFeedItemCreated"' in contracts
    assert 'UPSTREAM = "orders_feed"' in contracts
    env = (billing / "billing/migrations/env.py").read_text()
    assert 'run("billing_alembic_version", target_metadata=metadata)' in env
    readme = (billing / "README.md").read_text()
    assert "python -m billing.migrate" in readme and "BILLING_DATABASE_URL" in readme


def test_the_templates_ship_as_package_data() -> None:
    paths = {str(p) for p, _ in template_files()}
    assert "__service__/app.py" in paths and "tests/test_unit.py" in paths
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'outboxkit = ["py.typed", "templates/**/*.tmpl"]' in pyproject


def test_the_generated_code_compiles(billing: Path) -> None:
    assert compileall.compile_dir(billing, quiet=1, force=True)


@pytest.mark.parametrize("name", ["a", "abcdefghij_klmnopqrs_tuvwxyz12"])
def test_the_generated_code_passes_ruff_and_mypy_strict_whatever_the_name_length(
    tmp_path: Path, name: str
) -> None:
    assert generate(tmp_path, name, "--consumes", "the_longest_upstream_name_here") == 0
    folder = tmp_path / name
    for command in (["ruff", "check", "."], ["ruff", "format", "--check", "."]):
        done = subprocess.run(
            [str(BIN / command[0]), *command[1:]], cwd=folder, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stdout + done.stderr
    # The framework's packages from this checkout (their sources carry the types mypy checks);
    # the cache is kept with the project's (ignored by git): later runs check the service only.
    cache = ROOT / ".mypy_cache" / "generated-services"
    done = subprocess.run(
        [str(BIN / "mypy"), "--cache-dir", str(cache)],
        cwd=folder,
        capture_output=True,
        text=True,
        env={**os.environ, "MYPYPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_generated_unit_tests_pass(billing: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-m", "not integration", "-q", "-p", "no:cacheprovider"],
        cwd=billing,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert " passed" in done.stdout and "failed" not in done.stdout


@pytest.mark.parametrize(
    "name",
    ["Billing", "2fast", "my-service", "a__b", "billing_", "", "class", "json", "outbox", "x" * 31],
)
def test_a_bad_name_is_refused_with_exit_2_and_nothing_written(
    tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert generate(tmp_path, name) == 2
    assert "outboxkit new-service: error:" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_consuming_from_itself_or_a_bad_upstream_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert generate(tmp_path, "billing", "--consumes", "billing") == 2
    assert generate(tmp_path, "billing", "--consumes", "Orders") == 2
    assert "--consumes" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_second_run_refuses_to_overwrite_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert generate(tmp_path, "billing") == 0
    folder = tmp_path / "billing"
    (folder / "billing/app.py").write_text("# edited by its owner\n")
    before = snapshot(folder)
    capsys.readouterr()
    assert generate(tmp_path, "billing", "--consumes", "other") == 2
    err = capsys.readouterr().err
    assert "exists and is not empty" in err and "nothing was written" in err
    assert snapshot(folder) == before


def test_an_empty_folder_of_that_name_is_used(tmp_path: Path) -> None:
    (tmp_path / "billing").mkdir()
    assert generate(tmp_path, "billing") == 0
    assert (tmp_path / "billing/billing/app.py").exists()


def test_help_says_what_each_option_accepts(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["new-service", "--help"])
    assert exited.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--dir PATH" in text and "--consumes SERVICE" in text
    assert "lower-case letters and digits" in text and "default: the current folder" in text
