"""make_envelope's CPU per event with the record's size bounded (now) and computed exactly
(before), alternating in one process. Usage: python docs/bench/outbox-at-commit/record_bound.py"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import outbox.envelope as envelope

BOUND = envelope._record_bound
PAYLOAD = {"id": "o-1", "customer": "cust-1", "items": [{"sku": "widget", "qty": 2}], "n": 1}


def per_event(exact: bool, n: int = 20_000) -> float:
    envelope._record_bound = (lambda e, h: 10**9) if exact else BOUND  # type: ignore[assignment]
    started = time.process_time()
    for i in range(n):
        envelope.make_envelope(
            aggregate_type="order", aggregate_id=f"o-{i}", event_type="OrderPlaced", payload=PAYLOAD
        )
    return (time.process_time() - started) / n * 1e6


runs: dict[str, list[float]] = {"exact size (before)": [], "bound (after)": []}
for _ in range(7):
    runs["exact size (before)"].append(per_event(True))
    runs["bound (after)"].append(per_event(False))
envelope._record_bound = BOUND
print("| make_envelope | CPU µs/event, median of 7 (min-max) |")
print("|---|---|")
for name, samples in runs.items():
    print(f"| {name} | {statistics.median(samples):.1f} ({min(samples):.1f}-{max(samples):.1f}) |")
