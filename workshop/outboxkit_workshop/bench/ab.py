"""Before/after measurements side by side in one run: the two alternate in every round, the
order swapped every other round (so neither always runs first, on a warmer or colder machine),
and either runs in this process or in a checkout of the framework of its own."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
LABELS = ("before", "after")


def alternate(
    rounds: int, measure: Callable[[str], T], *, shown: Callable[[int, str, T], None] | None = None
) -> dict[str, list[T]]:
    """``measure("before")`` and ``measure("after")`` once each in every round, in turn order
    swapped every other round; ``shown(round, label, result)`` after each (progress)."""
    found: dict[str, list[T]] = {label: [] for label in LABELS}
    for r in range(rounds):
        for label in LABELS if r % 2 == 0 else LABELS[::-1]:
            found[label].append(measure(label))
            if shown is not None:
                shown(r + 1, label, found[label][-1])
    return found


def in_checkout(checkout: Path, code: str, *args: str) -> Any:
    """Run the Python ``code`` (with ``args`` as its argv) by this interpreter in ``checkout``,
    importing the framework from there; its last line of output, read as JSON."""
    out = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=checkout,
        env={"PYTHONPATH": str(checkout), "PATH": "/usr/bin:/bin"},
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])
