"""Before/after of publish's validation (``outbox.envelope.make_envelope``), side by side in one
run: the code of a git revision (before) against the working tree (after), interleaved rounds,
CPU time of this process per event, for payloads of several sizes. No database: this is the part
of an outbox write that runs in the service before its statement. Usage, from the repository:
    python docs/bench/payload-size-bound/ab.py [--before REV] [--rounds 5]
Prints a markdown table: microseconds of CPU per event, min-median-max, and after/before.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))


def load_before(rev: str) -> Any:
    """``outbox/envelope.py`` as it was at ``rev``, as a module beside today's package."""
    source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{rev}:outbox/envelope.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "envelope_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("envelope_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def payload(size: int) -> dict[str, Any]:
    """An order-like payload of about ``size`` bytes of compact JSON: nested objects, numbers,
    strings (the saga's kind of event, scaled by its number of line items)."""
    item = {"sku": "SKU-000123", "qty": 2, "price": 19.99, "name": "Blue mug, large"}
    lines = max(1, (size - 60) // 70)
    return {"id": str(uuid.uuid4()), "customer": "cust-42", "items": [item] * lines, "n": 7}


def per_event(make: Any, body: dict[str, Any], n: int) -> float:
    began = time.process_time()
    for _ in range(n):
        make(aggregate_type="order", aggregate_id="o-1", event_type="OrderPlaced", payload=body)
    return (time.process_time() - began) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", default="HEAD", help="git revision of the code before")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sizes", default="130,2000,20000,200000")
    args = parser.parse_args()
    from outbox import envelope as after

    variants = {"before": load_before(args.before).make_envelope, "after": after.make_envelope}
    sizes = [int(s) for s in args.sizes.split(",")]
    bodies = {s: payload(s) for s in sizes}
    results: dict[tuple[int, str], list[float]] = {}
    for r in range(args.rounds):
        for s in sizes:
            n = max(20, 400_000 // s)
            for name, make in variants.items():
                results.setdefault((s, name), []).append(per_event(make, bodies[s], n))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    print("| payload bytes (compact) | variant | CPU us/event min | median | max | after/before |")
    print("|---|---|---|---|---|---|")
    for s in sizes:
        before = statistics.median(results[(s, "before")])
        for name in variants:
            v = results[(s, name)]
            ratio = f"{statistics.median(v) / before:.2f}" if name == "after" else ""
            print(
                f"| {len(after.encode_payload(bodies[s])):,} | {name} | {min(v):,.1f} | "
                f"{statistics.median(v):,.1f} | {max(v):,.1f} | {ratio} |"
            )


if __name__ == "__main__":
    main()
