"""Before/after of the inbox's per-slice bookkeeping statements, side by side in one run: the
recorder of a git revision (before) against the working tree's (after), interleaved rounds, on
one Postgres. Per slice of ``--slice`` records with fresh UUIDs, in one transaction: lock the
watermark, look the ids up in the window (`recent`), the keys among parked records
(`parked_keys`), remember the ids (`remember`), advance the watermark; the client's CPU (this
process) and the wall time per slice. Usage, from the repository:
    python docs/bench/inbox-text-arrays/ab.py --url postgresql+psycopg://... [--before REV]
Prints a markdown table: milliseconds per slice, min-median-max, and after/before.
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

from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))


def load_before(rev: str) -> Any:
    """``inbox/recorder.py`` as it was at ``rev``, as a module beside today's package."""
    source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{rev}:inbox/recorder.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "recorder_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("recorder_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def one_slice(engine: Any, recorder: Any, partition: int, first: int, size: int) -> None:
    ids = [str(uuid.uuid4()) for _ in range(size)]
    keys = [f"k{n % 64}" for n in range(size)]
    with Session(engine) as session, session.begin():
        recorder.lock(session, "bench", partition)
        assert not recorder.recent(session, "bench", partition, ids)
        assert not recorder.parked_keys(session, "bench", partition, keys)
        applied = [(i, first + n) for n, i in enumerate(ids)]
        recorder.remember(session, "bench", partition, applied)
        recorder.advance(session, "bench", partition, first + size - 1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True, help="a Postgres with the framework's tables")
    parser.add_argument("--before", default="HEAD", help="git revision of the code before")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--slices", type=int, default=40)
    parser.add_argument("--slice", type=int, default=1000)
    args = parser.parse_args()
    from inbox import recorder as after

    engine = create_engine(args.url, pool_size=2)
    variants = {
        "before": load_before(args.before).Recorder("ab-before", window=50_000),
        "after": after.Recorder("ab-after", window=50_000),
    }
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    offsets = dict.fromkeys(variants, 0)
    for r in range(args.rounds):
        for name, recorder in variants.items():
            one_slice(engine, recorder, 0, offsets[name], args.slice)  # warm
            offsets[name] += args.slice
            cpu, wall = time.process_time(), time.perf_counter()
            for _ in range(args.slices):
                one_slice(engine, recorder, 0, offsets[name], args.slice)
                offsets[name] += args.slice
            results[name].append(
                (
                    (time.process_time() - cpu) / args.slices * 1e3,
                    (time.perf_counter() - wall) / args.slices * 1e3,
                )
            )
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM inbox_recent WHERE consumer LIKE 'ab-%'"))
        conn.execute(text("DELETE FROM inbox_watermark WHERE consumer LIKE 'ab-%'"))
    print(f"Per slice of {args.slice:,} records (window of 50,000 offsets), {args.rounds} rounds")
    print("of", args.slices, "slices each, interleaved.\n")
    print("| measure | variant | min ms | median | max | after/before |")
    print("|---|---|---|---|---|---|")
    for index, measure in enumerate(("client CPU", "wall")):
        base = statistics.median(x[index] for x in results["before"])
        for name in variants:
            v = [x[index] for x in results[name]]
            ratio = f"{statistics.median(v) / base:.2f}" if name == "after" else ""
            row = f"| {measure} | {name} | {min(v):.2f} | {statistics.median(v):.2f} | {max(v):.2f}"
            print(f"{row} | {ratio} |")


if __name__ == "__main__":
    main()
