"""Result files of a benchmark run: JSON for machines, a markdown table for people."""

from __future__ import annotations

import json
import platform
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def spread(samples: Sequence[float]) -> dict[str, float]:
    """min / median / max of repeated measurements."""
    return {
        "min": min(samples),
        "median": statistics.median(samples),
        "max": max(samples),
    }


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    import os

    import sqlalchemy

    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "sqlalchemy": sqlalchemy.__version__,
    }


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def write(folder: Path, name: str, data: dict[str, Any], markdown: str) -> list[Path]:
    """Write ``name``.json and ``name``.md into ``folder``; returns the paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{name}.json", folder / f"{name}.md"]
    paths[0].write_text(json.dumps(data, indent=2, default=str) + "\n")
    paths[1].write_text(markdown)
    return paths
