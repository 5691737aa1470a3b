"""The framework's top-level packages import each other by name: a service's own package under
one of those names, earlier on the path, would be imported in their place and fail later on a
submodule it does not have. The kernel checks once, when it is first imported (every framework
package imports it first), and refuses naming both places."""

from __future__ import annotations

import sys
from importlib.util import find_spec
from pathlib import Path

# The framework's other top-level packages, beside `outboxkit` in one distribution.
SIBLINGS = ("inbox", "outbox", "cdc", "migrations", "service_template", "spark_consumers")


def shadowed() -> str | None:
    """Why a package under one of the framework's package names, found first on the path, is
    not the framework's own (None: each found is, or is not installed)."""
    home = Path(__file__).resolve().parents[2]
    for name in SIBLINGS:
        module = sys.modules.get(name)
        if module is not None:
            origin = getattr(module, "__file__", None)
        else:
            try:
                spec = find_spec(name)
            except (ImportError, ValueError):  # not findable
                continue
            origin = spec.origin if spec is not None else None
        if origin is None:  # not installed, or a namespace package of nothing
            continue
        found = Path(origin).resolve().parent
        if found.parent != home:
            return (
                f"the package {name!r} on the path is {found}, not outboxkit's (beside "
                f"{home / 'outboxkit'}): a package of that name earlier on sys.path shadows it. "
                f"Rename yours, or move it under a package of your own (like myservice.{name})"
            )
    return None
