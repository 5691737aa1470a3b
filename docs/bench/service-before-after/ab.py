"""Before/after of the orders service's POST path, side by side in one run.

Two orders services on the same database (and the same stack), one per source tree, each started
with `serve_tree.py`; rounds of POSTs alternate between them. Usage:
    python ab.py NAME=URL=PID NAME=URL=PID [--rounds 3] [--orders 600] [--clients 1,8,32]
Prints a markdown table: POSTs/s and service CPU ms per POST (user + system, /proc), min-median-max.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from saga_harness.load import place_orders


def cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("variants", nargs="+", help="NAME=URL=PID")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--orders", type=int, default=600)
    parser.add_argument("--clients", default="1,8,32")
    args = parser.parse_args()
    variants = [v.split("=", 2) for v in args.variants]
    clients = [int(c) for c in args.clients.split(",")]
    for _, url, _ in variants:
        place_orders(url, 50, seed=1, concurrency=4, retry_share=0.0)  # warm
    results: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for r in range(args.rounds):
        for c in clients:
            for name, url, pid in variants:
                before, began = cpu(int(pid)), time.monotonic()
                placed = place_orders(
                    url, args.orders, seed=1000 * r + c, concurrency=c, retry_share=0.0
                )
                assert len(placed) == args.orders
                wall, used = time.monotonic() - began, cpu(int(pid)) - before
                results.setdefault((name, c), []).append(
                    (args.orders / wall, 1000 * used / args.orders)
                )
                print(
                    f"round {r + 1} clients {c} {name}: {args.orders / wall:.0f} POST/s, "
                    f"{1000 * used / args.orders:.2f} ms CPU/POST",
                    flush=True,
                )
    print("\n| clients | variant | POST/s min | median | max | CPU ms/POST min | median | max |")
    print("|---|---|---|---|---|---|---|---|")
    for c in clients:
        for name, _, _ in variants:
            rates = [x for x, _ in results[(name, c)]]
            cpus = [y for _, y in results[(name, c)]]
            print(
                f"| {c} | {name} | {min(rates):.0f} | {statistics.median(rates):.0f} | "
                f"{max(rates):.0f} | {min(cpus):.2f} | {statistics.median(cpus):.2f} | "
                f"{max(cpus):.2f} |"
            )


if __name__ == "__main__":
    main()
