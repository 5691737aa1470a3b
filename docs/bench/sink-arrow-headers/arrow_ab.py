"""The Spark sink's `records_from_arrow` of two checkouts, alternating in fresh processes: CPU
per 1,000 records of the Kafka source schema (six headers each, as the outbox's connector
writes them). Usage: python arrow_ab.py BEFORE_CHECKOUT AFTER_CHECKOUT [--rounds N]"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

ONE = r"""
import json, statistics, sys, time, uuid
sys.path.insert(0, sys.argv[1])
import pyarrow as pa
from spark_consumers.sink import records_from_arrow

N = 1000
HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
names = ("id", "eventType", "aggregateType", "traceparent", "headers", "schemaVersion")
rows = [
    [{"key": k, "value": v} for k, v in zip(names, (str(uuid.uuid4()).encode(), b"OrderPlaced",
     b"order", b"00-" + b"a" * 32 + b"-" + b"b" * 16 + b"-01", b"{}", b"1"))]
    for _ in range(N)
]
batch = pa.RecordBatch.from_arrays(
    [
        pa.array(["outbox.event.order"] * N),
        pa.array([3] * N, pa.int32()),
        pa.array(range(1000, 1000 + N), pa.int64()),
        pa.array([str(uuid.uuid4()).encode() for _ in range(N)], pa.binary()),
        pa.array([json.dumps({"amount": i, "orderId": str(uuid.uuid4())}).encode()
                  for i in range(N)], pa.binary()),
        pa.array(rows, HEADERS),
        pa.array([1_700_000_000_000_000 + i for i in range(N)], pa.timestamp("us")),
    ],
    names=["topic", "partition", "offset", "key", "value", "headers", "timestamp"],
)
for _ in range(3):
    records_from_arrow(batch)
took = []
for _ in range(40):
    started = time.process_time()
    records_from_arrow(batch)
    took.append((time.process_time() - started) * 1000)
print(statistics.median(took))
"""


def once(checkout: str) -> float:
    out = subprocess.run(
        [sys.executable, "-c", ONE, checkout], check=True, capture_output=True, text=True
    )
    return float(out.stdout.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    runs: dict[str, list[float]] = {"before": [], "after": []}
    for n in range(args.rounds):
        for label in ("before", "after"):
            runs[label].append(once(getattr(args, label)))
        print(
            f"round {n + 1}/{args.rounds}: before {runs['before'][-1]:.2f} ms, "
            f"after {runs['after'][-1]:.2f} ms",
            file=sys.stderr,
        )
    print("| checkout | min ms / 1,000 records | median | max |")
    print("|---|---|---|---|")
    for label, values in runs.items():
        print(
            f"| {label} | {min(values):.2f} | {statistics.median(values):.2f} | {max(values):.2f} |"
        )
    ratio = statistics.median(runs["after"]) / statistics.median(runs["before"])
    print(f"\nafter / before, medians: {ratio:.2f}")


if __name__ == "__main__":
    main()
