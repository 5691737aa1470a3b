"""Client CPU and wall time per service transaction, one thread, the variants alternating in
rounds: the order row alone, with its event written at publish, and with it written at commit.
Usage: python docs/bench/outbox-at-commit/txn_cpu.py URL [--rounds 6] [--transactions 2000]
(URL: a Postgres migrated to the framework's head). Prints a markdown table of medians over the
rounds, and each outbox variant's extra over the order row alone."""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from sqlalchemy import create_engine, insert
from sqlalchemy.orm import Session

from outbox.publish import Outbox
from outboxkit.bench.writes import ITEMS, metadata, orders, payload

VARIANTS = {
    "no outbox": None,
    "delete mode, at publish": Outbox("delete", at_commit=False),
    "delete mode, at commit": Outbox("delete"),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--transactions", type=int, default=2000)
    args = parser.parse_args()
    engine = create_engine(args.url, pool_size=1, max_overflow=0)
    metadata.create_all(engine)
    cpu: dict[str, list[float]] = {v: [] for v in VARIANTS}
    wall: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for r in range(args.rounds):
        for name, outbox in VARIANTS.items():
            c0, w0 = time.process_time(), time.perf_counter()
            for n in range(args.transactions):
                order_id = str(uuid.uuid4())
                with Session(engine) as session, session.begin():
                    session.execute(
                        insert(orders).values(id=order_id, customer="c", items=ITEMS, amount=n)
                    )
                    if outbox is not None:
                        outbox.publish(
                            session,
                            aggregate_type="order",
                            aggregate_id=order_id,
                            event_type="OrderPlaced",
                            payload=payload(order_id, n),
                        )
            cpu[name].append((time.process_time() - c0) / args.transactions * 1e6)
            wall[name].append((time.perf_counter() - w0) / args.transactions * 1e6)
        print(f"round {r + 1}/{args.rounds}", file=sys.stderr)
    base_cpu = statistics.median(cpu["no outbox"])
    base_wall = statistics.median(wall["no outbox"])
    print("| variant | client CPU µs/tx | extra | wall µs/tx | extra | ratio (tx/s) |")
    print("|---|---|---|---|---|---|")
    for name in VARIANTS:
        c, w = statistics.median(cpu[name]), statistics.median(wall[name])
        print(
            f"| {name} | {c:,.0f} | {c - base_cpu:+,.0f} | {w:,.0f} | {w - base_wall:+,.0f} "
            f"| {base_wall / w:.2f} |"
        )


if __name__ == "__main__":
    main()
