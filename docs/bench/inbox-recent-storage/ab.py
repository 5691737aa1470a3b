"""Before/after of the inbox window's storage (migration 0010), side by side in one run: the
framework's own `Recorder` remembering, looking up and pruning slices of 1,000 ids on a real
Postgres, with ``inbox_recent``'s arrays compressed as before (STORAGE EXTENDED, pglz) and stored
as they are (EXTERNAL), in interleaved rounds on freshly emptied tables. Usage, from the
repository, with a Postgres the framework's migrations are applied to:
    python docs/bench/inbox-recent-storage/ab.py URL [--rounds 6] [--window 10000]
Prints a markdown table: milliseconds per slice (median of a round's slices once the window is
full), min-median-max over the rounds, and after/before.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from inbox.recorder import Recorder
from outboxkit.bench.ab import alternate

STORAGE = {"before": "EXTENDED", "after": "EXTERNAL"}
SIZE = 1000


def one_round(engine, storage: str, window: int, slices: int) -> dict[str, float]:
    """Apply ``slices`` slices of SIZE fresh ids to one partition; median ms per statement."""
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM inbox_recent WHERE consumer = 'ab'"))
        conn.execute(
            text(
                f"ALTER TABLE inbox_recent ALTER COLUMN event_ids SET STORAGE {storage},"
                f" ALTER COLUMN offsets SET STORAGE {storage}"
            )
        )
    recorder = Recorder("ab", window=window)
    times: dict[str, list[float]] = {"lookup": [], "remember": [], "prune": []}
    for n in range(slices):
        ids = [str(uuid.uuid4()) for _ in range(SIZE)]
        applied = [(event_id, n * SIZE + i) for i, event_id in enumerate(ids)]
        with Session(engine) as session, session.begin():
            t0 = time.perf_counter()
            recorder.recent(session, "t", 0, ids)
            t1 = time.perf_counter()
            recorder.remember(session, "t", 0, applied)
            t2 = time.perf_counter()
            session.execute(
                text(
                    "DELETE FROM inbox_recent WHERE consumer = 'ab' AND topic = 't'"
                    " AND partition = 0 AND last_offset < :floor"
                ),
                {"floor": (n + 1) * SIZE - window},
            )
            t3 = time.perf_counter()
        if n * SIZE >= window:  # the window is full: the steady state
            times["lookup"].append(t1 - t0)
            times["remember"].append(t2 - t1)
            times["prune"].append(t3 - t2)
    return {k: statistics.median(v) * 1000 for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--window", type=int, default=10_000)
    args = parser.parse_args()
    engine = create_engine(args.url)
    slices = 2 * args.window // SIZE + 10
    try:
        results = alternate(
            args.rounds,
            lambda label: one_round(engine, STORAGE[label], args.window, slices),
            shown=lambda r, label, done: print(
                f"round {r}/{args.rounds} {label}: {done}", file=sys.stderr
            ),
        )
    finally:
        with engine.begin() as conn:  # leave the table as the migrations made it
            conn.execute(text("DELETE FROM inbox_recent WHERE consumer = 'ab'"))
            conn.execute(
                text(
                    "ALTER TABLE inbox_recent ALTER COLUMN event_ids SET STORAGE EXTERNAL,"
                    " ALTER COLUMN offsets SET STORAGE EXTERNAL"
                )
            )
        engine.dispose()
    print(f"window {args.window:,} offsets, slices of {SIZE:,} ids, {args.rounds} rounds\n")
    print(
        "| ms per slice | before (EXTENDED) min / median / max "
        "| after (EXTERNAL) min / median / max | after/before (medians) |"
    )
    print("|---|---|---|---|")
    for step in ("lookup", "remember", "prune", "total"):
        b, a = (column(results[label], step) for label in ("before", "after"))
        ratio = statistics.median(a) / statistics.median(b)
        print(f"| {step} | {spread(b)} | {spread(a)} | {ratio:.2f} |")


def column(rounds: list[dict[str, float]], step: str) -> list[float]:
    """One step's figure of each round (``total``: the three summed)."""
    return [sum(r.values()) if step == "total" else r[step] for r in rounds]


def spread(values: list[float]) -> str:
    return f"{min(values):.2f} / {statistics.median(values):.2f} / {max(values):.2f}"


if __name__ == "__main__":
    main()
