"""The Python API reference: one page per framework package, documenting exactly the names in
its ``__init__.__all__`` (rendered from their docstrings and signatures by mkdocstrings)."""

from __future__ import annotations

import importlib
import importlib.util
import inspect

# The framework's packages, in the order of an event's way: written, relayed, consumed, served;
# then the migrations every database takes, the shared kernel's names a service uses itself, and
# the harness its tests run on.
PACKAGES = (
    "outbox",
    "cdc",
    "inbox",
    "spark_consumers",
    "service_template",
    "migrations",
    "outboxkit.kernel",
    "outboxkit.testing",
    "outboxkit.scripts",
)


def public_names(package: str) -> list[str]:
    """The package's ``__all__``: its public API (every other name is private by convention)."""
    names = getattr(importlib.import_module(package), "__all__", None)
    if not names:
        raise ValueError(f"{package}/__init__.py has no __all__: name its public API there")
    return list(names)


def shadowed(package: str, name: str) -> str | None:
    """The full path of a public name that a submodule of the same name defines
    (``spark_consumers.audit``, the function in ``spark_consumers/audit.py``), else None. Such a
    ``package.name`` reads as the submodule, to the documentation tools and to Python once the
    submodule is imported, so the name is documented by its full path."""
    if importlib.util.find_spec(f"{package}.{name}") is None:
        return None
    submodule = importlib.import_module(f"{package}.{name}")
    value = getattr(submodule, name, None)
    if value is None or inspect.ismodule(value):
        return None
    return f"{value.__module__}.{value.__qualname__}"


def anchor(package: str, name: str) -> str:
    """The HTML id of a public name on its package's page."""
    return shadowed(package, name) or f"{package}.{name}"


def page(package: str) -> str:
    """The package's page: its docstring, then each public name in ``__all__``."""
    names = public_names(package)
    members = "\n".join(f"        - {n}" for n in names if not shadowed(package, n))
    lines = [
        f"# `{package}`\n",
        f"The public API of `{package}`: the names in its `__all__`, generated from their "
        "docstrings when the site is built.\n",
        f"::: {package}\n"
        "    options:\n"
        "      show_root_heading: false\n"
        "      show_root_toc_entry: false\n"
        "      members:\n"
        f"{members}\n",
    ]
    for name in names:
        path = shadowed(package, name)
        if path:
            lines.append(
                f"::: {path}\n"
                "    options:\n"
                "      show_root_heading: true\n"
                "      show_root_full_path: false\n"
                "      heading_level: 2\n"
            )
    return "\n".join(lines)


def index() -> str:
    """The API section's first page: the packages and their public names."""
    lines = [
        "# Python API",
        "",
        "Each framework package names its public API in `__init__.__all__`; these pages document "
        "exactly those names (everything else is private by convention).",
        "",
        "| Package | Public names |",
        "|---|---|",
    ]
    for package in PACKAGES:
        names = ", ".join(
            f"[`{name}`]({package}.md#{anchor(package, name)})" for name in public_names(package)
        )
        lines.append(f"| [`{package}`]({package}.md) | {names} |")
    return "\n".join(lines) + "\n"
