"""saga-ab.log (written by saga_ab.sh) as a markdown table, before and after, round by round.
Usage, from this folder: python saga_table.py saga-ab.log
"""

import collections
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

Cell = Callable[[dict[str, Any]], str]
ROUNDS = (1, 2, 3)


def read(log: Path) -> dict[tuple[str, float], dict[tuple[str, int], dict[str, Any]]]:
    """Each measurement of the log by (kind, rate), then by (variant, round)."""
    found: dict[tuple[str, float], dict[tuple[str, int], dict[str, Any]]] = collections.defaultdict(
        dict
    )
    for line in log.read_text().splitlines():
        parts = line.split(" ", 3)
        if len(parts) < 4 or parts[1] not in ("rate", "step"):
            continue
        label, kind, rate, body = parts
        variant, round_ = label.rsplit("-", 1)
        found[(kind, float(rate))][(variant, int(round_))] = json.loads(body)
    return found


def hops(d: dict[str, Any]) -> str:
    values = d["hops_p50"].values()
    return f"{min(values):.2f}-{max(values):.2f} s"


def main() -> None:
    found = read(Path(sys.argv[1]))
    rows: list[tuple[str, str, float, Cell]] = []
    for rate in (10.0, 50.0):
        rows += [
            (f"POST -> final p99 at {rate:g}/s", "rate", rate, lambda d: f"{d['p99']:.2f} s"),
            (f"POST -> final p50 at {rate:g}/s", "rate", rate, lambda d: f"{d['p50']:.2f} s"),
            (f"hops p50 at {rate:g}/s", "rate", rate, hops),
            (
                f"addBatch at {rate:g}/s",
                "rate",
                rate,
                lambda d: f"{d['batch_phases_ms']['addBatch']:.0f} ms",
            ),
            (
                f"consumers' CPU per order at {rate:g}/s",
                "rate",
                rate,
                lambda d: f"{d['cpu_ms_per_order']['consumers']:.1f} ms",
            ),
            (
                f"CPU per order at {rate:g}/s, all processes",
                "rate",
                rate,
                lambda d: f"{sum(d['cpu_ms_per_order'].values()):.1f} ms",
            ),
        ]
    rows.append(
        (
            "step 100/s: orders final in time; p99 (second half)",
            "step",
            100.0,
            lambda d: f"{d['completed_in_time'] * 100:.1f}%; {d['p99_second_half']:.1f} s",
        )
    )
    print("| measure (rounds 1 / 2 / 3) | before | after |")
    print("|---|---|---|")
    for name, kind, rate, cell in rows:
        by_variant = []
        for variant in ("before", "after"):
            got = [found[(kind, rate)].get((variant, r)) for r in ROUNDS]
            by_variant.append(" / ".join("—" if d is None else cell(d) for d in got))
        print(f"| {name} | {by_variant[0]} | {by_variant[1]} |")


if __name__ == "__main__":
    main()
