"""The packages' layers, read from the imports: each package imports only the ones below it (the
table in the README's "Where things live"), the product never imports the workshop, the dev
stack only from the places that run it, and no framework module grows into a hub again."""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Each package and what it may import (the README's table says the same in words).
# A room is a top-level package, or one of the packages under `outboxkit` or the workshop that is
# a layer of its own: the kernel at the bottom; the test harness users run their services in,
# above the framework, which never imports it; the workshop (`outboxkit_workshop`, its own
# distribution under workshop/) on top: the dev stack, the example saga and its harness.
KERNEL, TESTING = "outboxkit.kernel", "outboxkit.testing"
WORKSHOP = "outboxkit_workshop"
DEVSTACK, SAGA, HARNESS = (f"{WORKSHOP}.devstack", f"{WORKSHOP}.saga", f"{WORKSHOP}.saga_harness")
MAY_IMPORT: dict[str, set[str]] = {
    KERNEL: set(),
    "outbox": {KERNEL},
    "cdc": {KERNEL},
    "inbox": {KERNEL, "outbox"},
    "migrations": {KERNEL, "outbox", "inbox"},
    "spark_consumers": {KERNEL, "outbox", "inbox", "cdc"},
    "service_template": {KERNEL, "outbox", "inbox", "migrations"},
    TESTING: {KERNEL, "outbox", "inbox", "migrations", "service_template", "spark_consumers"},
}
# The product's application (the operator CLI) sits on the framework; the workshop on top of all.
MAY_IMPORT["outboxkit"] = set(MAY_IMPORT)
PRODUCT = tuple(MAY_IMPORT)
MAY_IMPORT[DEVSTACK] = {KERNEL, "outbox", "cdc", "migrations", "outboxkit"}
MAY_IMPORT[SAGA] = {KERNEL, "outbox", "inbox", "migrations", "service_template", "spark_consumers"}
MAY_IMPORT[SAGA] |= {"outboxkit"}
MAY_IMPORT[HARNESS] = {KERNEL, "outbox", "cdc", "inbox", "outboxkit", SAGA, DEVSTACK}
MAY_IMPORT[WORKSHOP] = set(MAY_IMPORT)
SUB_ROOMS = (KERNEL, TESTING, DEVSTACK, SAGA, HARNESS)
FRAMEWORK = (
    KERNEL,
    "outbox",
    "cdc",
    "inbox",
    "migrations",
    "spark_consumers",
    "service_template",
)
OPERATOR = [
    "outboxkit/settings.py",
    "outboxkit/endpoints.py",
    *(f"outboxkit/commands/{name}.py" for name in ("db", "outbox", "cdc", "consume", "inbox")),
    *(f"outboxkit/commands/{name}.py" for name in ("audit", "schemas", "cdc_setup")),
]
MAX_LINES = 400


def folder_of(room: str) -> Path:
    """Where a room's files are (the workshop's distribution lives under workshop/)."""
    top = ROOT / "workshop" if room.startswith(WORKSHOP) else ROOT
    return top.joinpath(*room.split("."))


def python_files(room: str) -> Iterator[Path]:
    folder = folder_of(room)
    inner = [folder_of(sub) for sub in SUB_ROOMS if sub.startswith(f"{room}.")]
    for path in sorted(folder.rglob("*.py")):
        if not any(path.is_relative_to(sub) for sub in inner):
            yield path


def room_of(module: str) -> str | None:
    """The room a module belongs to (None: not the project's)."""
    for sub in SUB_ROOMS:
        if module == sub or module.startswith(f"{sub}."):
            return sub
    top = module.split(".")[0]
    return top if top in MAY_IMPORT else None


def imported_packages(path: Path) -> set[str]:
    """The top-level project packages ``path`` imports (anywhere in it, lazily or not)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        else:
            continue
        found |= {room for room in map(room_of, names) if room is not None}
    return found


@pytest.mark.parametrize("package", sorted(MAY_IMPORT))
def test_a_package_imports_only_the_layers_below_it(package: str) -> None:
    for path in python_files(package):
        beyond = imported_packages(path) - MAY_IMPORT[package] - {package}
        assert not beyond, f"{path.relative_to(ROOT)} imports {sorted(beyond)}"


def test_the_layers_have_no_cycle() -> None:
    # A package below another may not import it back: the allowed imports form an order.
    placed: list[str] = []
    left = dict(MAY_IMPORT)
    while left:
        ready = [p for p, below in left.items() if below <= set(placed)]
        assert ready, f"a cycle among {sorted(left)}"
        placed += ready
        for p in ready:
            del left[p]


def test_only_what_runs_the_dev_stack_imports_it() -> None:
    users = [
        path.relative_to(ROOT).as_posix()
        for package in (*FRAMEWORK, SAGA)
        for path in python_files(package)
        if DEVSTACK in imported_packages(path)
    ]
    users += [path for path in OPERATOR if DEVSTACK in imported_packages(ROOT / path)]
    assert users == []


def test_the_product_never_imports_the_workshop() -> None:
    workshop = {room for room in MAY_IMPORT if room.startswith(WORKSHOP)}
    for package in PRODUCT:
        assert not MAY_IMPORT[package] & workshop, package
        for path in python_files(package):
            reached = imported_packages(path) & workshop
            assert not reached, f"{path.relative_to(ROOT)} imports {sorted(reached)}"


def test_the_workshop_joins_the_cli_and_the_endpoints_through_entry_points() -> None:
    # The operator commands fall back to a local stack, and `outboxkit dev` exists, only where
    # the workshop is installed: the product names the entry point groups, the workshop fills them.
    project = tomllib.loads((ROOT / "workshop" / "pyproject.toml").read_text())["project"]
    groups = project["entry-points"]
    assert groups["outboxkit.commands"] == {"dev": f"{WORKSHOP}.commands.dev"}
    assert groups["outboxkit.local_stack"] == {"stack": f"{WORKSHOP}.endpoints"}
    assert "outboxkit.local_stack" in (ROOT / "outboxkit/endpoints.py").read_text()
    assert "outboxkit.commands" in (ROOT / "outboxkit/cli.py").read_text()


def test_the_application_package_root_imports_nothing_of_the_project() -> None:
    # Every framework package imports the kernel, so `outboxkit/__init__.py` runs first: it stays
    # free of the application's imports (and of anything slow).
    assert imported_packages(ROOT / "outboxkit/__init__.py") == set()


@pytest.mark.parametrize("package", FRAMEWORK)
def test_no_framework_module_is_a_hub(package: str) -> None:
    for path in python_files(package):
        lines = len(path.read_text().splitlines())
        assert lines <= MAX_LINES, f"{path.relative_to(ROOT)}: {lines} lines"


def test_the_check_sees_an_import_up_a_layer(tmp_path: Path) -> None:
    wrong = tmp_path / "wrong.py"
    wrong.write_text(
        "def f():\n    from outboxkit_workshop.devstack.stack import Stack\n    return Stack\n"
    )
    assert imported_packages(wrong) == {DEVSTACK}
    assert DEVSTACK not in MAY_IMPORT["inbox"]
