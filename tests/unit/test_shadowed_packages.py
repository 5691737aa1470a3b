"""A service's own package under one of the framework's package names, earlier on the path, is
refused at import with a message that names both places, instead of failing later on a
submodule the foreign package does not have."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import outboxkit
from outboxkit.kernel import packages


def imported(code: str, path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(path)}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=path, env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("name", packages.SIBLINGS)
def test_a_foreign_package_under_a_framework_name_is_named_at_import(
    name: str, tmp_path: Path
) -> None:
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text("")
    done = imported("import inbox, service_template", tmp_path)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    home = Path(outboxkit.__file__).resolve().parent
    assert last == (
        f"ImportError: the package {name!r} on the path is {(tmp_path / name).resolve()}, not "
        f"outboxkit's (beside {home}): a package of that name earlier on sys.path shadows it. "
        f"Rename yours, or move it under a package of your own (like myservice.{name})"
    )


def test_a_service_with_packages_of_other_names_imports_the_framework(tmp_path: Path) -> None:
    (tmp_path / "orders").mkdir()
    (tmp_path / "orders" / "__init__.py").write_text("")
    done = imported("import orders, service_template, inbox, spark_consumers", tmp_path)
    assert done.returncode == 0, done.stderr
    assert packages.shadowed() is None
