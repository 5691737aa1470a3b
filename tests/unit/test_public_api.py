"""Each framework package names its public API in `__init__.__all__`: every name resolves, the
packages ship `py.typed`, and declaring a consumer job does not import Spark."""

from __future__ import annotations

import importlib
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PUBLIC = ("outbox", "inbox", "cdc", "spark_consumers", "service_template")


@pytest.mark.parametrize("package", PUBLIC)
def test_every_public_name_resolves(package: str) -> None:
    module = importlib.import_module(package)
    names = module.__all__
    missing = [name for name in names if not hasattr(module, name)]
    assert missing == [], f"{package}.__all__ names what it does not define: {missing}"
    assert module.__doc__, f"{package} has no docstring"


@pytest.mark.parametrize("package", PUBLIC)
def test_package_is_typed(package: str) -> None:
    assert (ROOT / package / "py.typed").is_file()
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "py.typed" in data["package-data"].get(package, []), f"{package}/py.typed not shipped"


def test_declaring_jobs_does_not_import_spark() -> None:
    code = (
        "import sys, spark_consumers, inbox, outbox\n"
        "from spark_consumers import Job, ConsumerSettings\n"
        "print(sorted(m for m in ('pyspark', 'pyarrow') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_lazy_names_resolve_to_their_modules() -> None:
    import spark_consumers
    from spark_consumers.runner import run_jobs

    assert spark_consumers.run_jobs is run_jobs
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        _ = spark_consumers.nothing  # type: ignore[attr-defined]


@pytest.mark.parametrize("package", PUBLIC)
def test_no_public_name_is_shadowed_by_a_submodule(package: str) -> None:
    """``package.name`` turns into the submodule ``package/name.py`` once it is imported."""
    import pkgutil

    module = importlib.import_module(package)
    submodules = {info.name for info in pkgutil.iter_modules(module.__path__)}
    assert sorted(set(module.__all__) & submodules) == []
