"""Result files of a benchmark run: JSON for machines, a markdown table and PNG plots for people,
and a progress display that also reports when the output is not a terminal (CI logs)."""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

# How `bench inbox` holds its records, said in its report and in the published figures.
FROZEN_INPUT = (
    "The records are built before the clock starts and frozen out of Python's cyclic "
    "garbage collector, as a consumer's Python worker freezes its long-lived objects."
)


def spread(samples: Sequence[float]) -> dict[str, float]:
    """min / median / max of repeated measurements."""
    return {
        "min": min(samples),
        "median": statistics.median(samples),
        "max": max(samples),
    }


def percentile(samples: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``samples`` by rank; NaN when there are none."""
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def machine(database_url: str | None = None) -> dict[str, Any]:
    """What the figures were measured on: machine, Python and library versions, and the
    Postgres server version when ``database_url`` is given."""
    import confluent_kafka
    import sqlalchemy

    from outboxkit_workshop.devstack.artifacts import pinned_versions

    pins = pinned_versions()

    found: dict[str, Any] = {
        "python": platform.python_version(),
        # The kernel release's local version can name the machine: the version numbers only.
        "platform": "-".join(
            (platform.system(), platform.release().split("-")[0], platform.machine())
        ),
        "cpus": os.cpu_count(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "sqlalchemy": sqlalchemy.__version__,
        "confluent_kafka": confluent_kafka.version()[0],
        "librdkafka": confluent_kafka.libversion()[0],
        "debezium": pins.debezium,
        "kafka": pins.kafka,
    }
    try:
        import pyspark

        found["pyspark"] = pyspark.__version__
    except ImportError:
        pass
    if database_url:
        from sqlalchemy import create_engine, pool, text

        engine = create_engine(database_url, poolclass=pool.NullPool)
        with engine.connect() as conn:
            found["postgres"] = conn.execute(text("SHOW server_version")).scalar_one()
        engine.dispose()
    return found


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def spread_cells(samples: Sequence[float], fmt: str = ",.0f") -> list[str]:
    """min, median and max of ``samples`` formatted for a table row."""
    s = spread(samples)
    return [format(s[k], fmt) for k in ("min", "median", "max")]


def ratio(value: float) -> str:
    """A ratio for a table: two decimals, three when it is small."""
    return f"{value:.2f}" if value >= 0.1 else f"{value:.3f}"


def ratio_rows(series: Mapping[str, Sequence[float]], base: str) -> list[list[str]]:
    """Table rows: each series' name, min, median, max, and median / the ``base`` median."""
    reference = spread(series[base])["median"]
    return [
        [name, *spread_cells(samples), ratio(spread(samples)["median"] / reference)]
        for name, samples in series.items()
    ]


def write(folder: Path, name: str, data: dict[str, Any], markdown: str) -> list[Path]:
    """Write ``name``.json and ``name``.md into ``folder``; returns the paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{name}.json", folder / f"{name}.md"]
    paths[0].write_text(json.dumps(data, indent=2, default=str) + "\n")
    paths[1].write_text(markdown)
    return paths


# -- plots ----------------------------------------------------------------------------------
def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def bar_plot(
    path: Path,
    title: str,
    series: Mapping[str, Sequence[float]],
    *,
    ylabel: str,
    groups: Sequence[str] | None = None,
) -> Path:
    """Bars at the median with min..max whiskers. ``series`` maps a label to its samples; with
    ``groups``, labels are "group / variant" and bars are grouped by the part before " / "."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.2), dpi=110)
    if groups:
        variants = list(dict.fromkeys(label.split(" / ", 1)[1] for label in series))
        width = 0.8 / len(variants)
        for i, variant in enumerate(variants):
            xs, meds, lows, highs = [], [], [], []
            for g, group in enumerate(groups):
                samples = series.get(f"{group} / {variant}")
                if not samples:
                    continue
                s = spread(samples)
                xs.append(g + (i - (len(variants) - 1) / 2) * width)
                meds.append(s["median"])
                lows.append(s["median"] - s["min"])
                highs.append(s["max"] - s["median"])
            ax.bar(xs, meds, width, yerr=[lows, highs], capsize=3, label=variant)
        ax.set_xticks(range(len(groups)), groups)
        ax.legend(fontsize=8)
    else:
        labels = list(series)
        stats = [spread(series[label]) for label in labels]
        meds = [s["median"] for s in stats]
        err = [[s["median"] - s["min"] for s in stats], [s["max"] - s["median"] for s in stats]]
        ax.bar(range(len(labels)), meds, yerr=err, capsize=3, color="tab:blue")
        ax.set_xticks(range(len(labels)), labels, rotation=15, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def histogram_plot(
    path: Path, title: str, samples: Sequence[float], *, xlabel: str, marks: Mapping[str, float]
) -> Path:
    """A histogram of ``samples`` with vertical lines at ``marks`` (e.g. p50/p95/p99)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.2), dpi=110)
    ax.hist(samples, bins=40, color="tab:blue", alpha=0.8)
    colors = ("tab:green", "tab:orange", "tab:red", "tab:purple")
    for (label, value), color in zip(marks.items(), colors, strict=False):
        ax.axvline(value, color=color, linestyle="--", label=f"{label} {value:.2f}")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("orders")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


# -- progress -------------------------------------------------------------------------------
class Progress:
    """One task's progress: a rich bar on a terminal, a line every ``every`` seconds otherwise
    (so a benchmark run in CI or piped to a file still shows it is moving)."""

    def __init__(self, description: str, total: float, *, every: float = 10.0) -> None:
        self.description, self.total, self.every = description, total, every
        self.done = 0.0
        self._bar: Any = None
        self._last = 0.0

    def __enter__(self) -> Progress:
        if sys.stdout.isatty():
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress()
            self._bar.start()
            self._task = self._bar.add_task(self.description, total=self.total)
        else:
            self._say()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._bar is not None:
            self._bar.stop()
        else:
            self._say()

    def _say(self) -> None:
        self._last = time.monotonic()
        share = 100 * self.done / self.total if self.total else 100
        print(f"[bench] {self.description}: {share:.0f}%", flush=True)

    def update(self, description: str | None = None, *, advance: float = 0) -> None:
        self.done += advance
        if description:
            self.description = description
        if self._bar is not None:
            self._bar.update(self._task, description=self.description, completed=self.done)
        elif time.monotonic() - self._last >= self.every:
            self._say()

    def advance(self, n: float) -> None:
        self.update(advance=n)


def describe(found: Mapping[str, Any]) -> str:
    """One markdown line saying what the figures were measured on."""
    parts = [f"{found['cpus']} CPUs", found["platform"], f"Python {found['python']}"]
    if found.get("memory_gib"):
        parts.insert(1, f"{found['memory_gib']:g} GiB RAM")
    for key, label in (
        ("postgres", "Postgres"),
        ("debezium", "Debezium"),
        ("pyspark", "PySpark"),
        ("librdkafka", "librdkafka"),
        ("sqlalchemy", "SQLAlchemy"),
    ):
        if key in found:
            parts.append(f"{label} {found[key]}")
    return "Measured on: " + ", ".join(parts) + ".\n"
