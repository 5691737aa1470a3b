"""Before/after of the outbox write's client CPU, side by side in one run: `bench outbox`'s own
transactions (one order row, and its event in delete mode) from two checkouts of the framework
in alternating processes, on one Postgres. Usage, from the repository, with the before at
another path (e.g. `git worktree add /tmp/before <commit>`):
    python docs/bench/outbox-cursor/ab.py URL BEFORE_CHECKOUT [--rounds 8] [--transactions 3000]
Prints a markdown table per writer count: transactions/s and client CPU per transaction,
min / median / max over the rounds, the outbox's extra CPU per event (median of each round's
difference to the same process's no-outbox run) and the ratio to no outbox.
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

BASELINE, OUTBOX = "no outbox", "outbox, delete mode"
# One measurement of both variants at each writer count, in the checkout the process runs in.
ONE_ROUND = """
import json, sys
from sqlalchemy import create_engine
from outboxkit.bench import writes as w
writers = json.loads(sys.argv[3])
engine = create_engine(sys.argv[1], pool_size=max(writers), max_overflow=0)
w.metadata.create_all(engine)
found = {}
for n in writers:
    for variant in (w.BASELINE, "outbox, delete mode"):
        w.reset(engine)
        m = w.measure(engine, variant, n, int(sys.argv[2]), lambda k: None)
        found[f"{n} / {variant}"] = [m.rate, m.cpu_us]
print(json.dumps(found))
"""


def cells(values: list[float], fmt: str) -> str:
    return " / ".join(spread_cells(values, fmt))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("before", type=Path)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--transactions", type=int, default=3000)
    parser.add_argument("--writers", default="1,4")
    args = parser.parse_args()
    writers = [int(w) for w in args.writers.split(",")]
    checkouts = {"before": args.before.resolve(), "after": HERE}

    def one_round(label: str) -> dict[str, list[float]]:
        found = in_checkout(
            checkouts[label], ONE_ROUND, args.url, str(args.transactions), json.dumps(writers)
        )
        return dict(found)

    def shown(r: int, label: str, _: object) -> None:
        print(f"round {r}/{args.rounds} {label}", file=sys.stderr)

    runs = alternate(args.rounds, one_round, shown=shown)
    print(
        "| writers | code | no outbox tx/s | outbox tx/s | ratio (median of rounds) |"
        " client CPU µs/tx, no outbox | outbox | the outbox's µs/event (median) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for n in writers:
        base, out = f"{n} / {BASELINE}", f"{n} / {OUTBOX}"
        for label in ("before", "after"):
            rr = runs[label]
            ratio = statistics.median(x[out][0] / x[base][0] for x in rr)
            extra = statistics.median(x[out][1] - x[base][1] for x in rr)
            print(
                f"| {n} | {label} | {cells([x[base][0] for x in rr], ',.0f')}"
                f" | {cells([x[out][0] for x in rr], ',.0f')} | {ratio:.2f}"
                f" | {cells([x[base][1] for x in rr], ',.0f')}"
                f" | {cells([x[out][1] for x in rr], ',.0f')} | {extra:,.0f} |"
            )


if __name__ == "__main__":
    main()
