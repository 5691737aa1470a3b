"""The write at commit against the write at publish, paired: `bench outbox`'s transaction (one
order row, one 149-byte event in delete mode, durable commits) for the order row alone, the
event written at publish and the event written at commit, interleaved in each round at 1, 4 and
16 writers; each round's ratios are against that round's order row alone. Usage:
    python docs/bench/outbox-at-commit/ab_writes.py URL [--rounds 10] [--transactions 1000]
(URL: a Postgres migrated to the framework's head). Prints a markdown table: the per-round
ratios' min / median / max, the tx/s medians, and the client CPU per transaction's median."""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from sqlalchemy import create_engine

from outboxkit.bench import writes

VARIANTS = (writes.BASELINE, writes.AT_PUBLISH, "outbox, delete mode")
LABEL = {writes.AT_PUBLISH: "at publish", "outbox, delete mode": "at commit (default)"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--transactions", type=int, default=1000)
    args = parser.parse_args()
    engine = create_engine(args.url, pool_size=20, max_overflow=0)
    writes.metadata.create_all(engine)
    runs: dict[tuple[int, str], list[writes.Measured]] = {}
    for r in range(args.rounds):
        for w in writes.WRITERS:
            for variant in VARIANTS:
                measured = writes.measure(engine, variant, w, args.transactions, lambda n: None)
                runs.setdefault((w, variant), []).append(measured)
            writes.reset(engine)
        print(f"round {r + 1}/{args.rounds}", file=sys.stderr)
    print(
        "| writers | variant | ratio min / median / max (per round) | tx/s median "
        "| client CPU µs/tx median |"
    )
    print("|---|---|---|---|---|")
    for w in writes.WRITERS:
        base = runs[(w, writes.BASELINE)]
        for variant in VARIANTS:
            measured = runs[(w, variant)]
            ratios = [m.rate / b.rate for m, b in zip(measured, base, strict=True)]
            cells = f"{min(ratios):.2f} / **{statistics.median(ratios):.2f}** / {max(ratios):.2f}"
            rate = statistics.median(m.rate for m in measured)
            cpu = statistics.median(m.cpu_us for m in measured)
            name = LABEL.get(variant, variant)
            print(f"| {w} | {name} | {cells} | {rate:,.0f} | {cpu:,.0f} |")


if __name__ == "__main__":
    main()
