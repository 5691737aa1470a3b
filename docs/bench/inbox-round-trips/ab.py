"""Before/after of the inbox's per-slice bookkeeping, side by side in one run: `bench inbox`'s
own variants (the same records, handler and transactions) run by two checkouts of the
framework in alternating processes on one Postgres migrated to the newer head. Usage, from the
repository, with the before at another path (e.g. `git worktree add /tmp/before <commit>`):
    python docs/bench/inbox-round-trips/ab.py URL BEFORE_CHECKOUT [--rounds 8] [--events 20000]
Prints a markdown table: rows/s min / median / max over the rounds, each variant's ratio to the
unguarded batch handler of the same process (median of the rounds' ratios), after/before.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(HERE))

from outboxkit.bench.ab import alternate, in_checkout  # noqa: E402
from outboxkit.bench.report import spread_cells  # noqa: E402

BASELINE = "unguarded, batch handler"
VARIANTS = [
    BASELINE,
    "watermark, batch handler",
    "inbox, watermark only (window 0), batch handler",
    "inbox, exactly-once source (10,000 window), batch handler",
    "inbox, batch handler",
]
# One measurement of every variant, in the checkout the process runs in (its cwd).
ONE_ROUND = """
import json, sys
from sqlalchemy import create_engine
from outboxkit.bench import inbox as b
engine = create_engine(sys.argv[1])
b.bench_metadata.create_all(engine)
rates = {}
for name in json.loads(sys.argv[2]):
    rates[name] = b.run_variant(engine, name, int(sys.argv[3]), 1000, lambda n: None).rate
print(json.dumps(rates))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("before", type=Path)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--events", type=int, default=20_000)
    args = parser.parse_args()
    checkouts = {"before": args.before.resolve(), "after": HERE}

    def one_round(label: str) -> dict[str, float]:
        variants = json.dumps(VARIANTS)
        return in_checkout(checkouts[label], ONE_ROUND, args.url, variants, str(args.events))

    def shown(r: int, label: str, rates: dict[str, float]) -> None:
        ratio = rates[VARIANTS[3]] / rates[BASELINE]
        print(f"round {r}/{args.rounds} {label}: exactly-once {ratio:.2f}", file=sys.stderr)

    runs = alternate(args.rounds, one_round, shown=shown)
    print(
        "| variant | before rows/s min / median / max | ratio | after rows/s min / median / max"
        " | ratio | after/before (ratios) |"
    )
    print("|---|---|---|---|---|---|")
    for name in VARIANTS:
        cells = []
        ratios = {}
        for label in ("before", "after"):
            rates = " / ".join(spread_cells([run[name] for run in runs[label]]))
            ratios[label] = statistics.median(run[name] / run[BASELINE] for run in runs[label])
            cells.append(f"{rates} | {ratios[label]:.2f}")
        print(f"| {name} | {cells[0]} | {cells[1]} | {ratios['after'] / ratios['before']:.2f} |")


if __name__ == "__main__":
    main()
