"""Client CPU of each part of `bench outbox`'s transaction, one thread (`time.thread_time`):
opening the session with the order's INSERT, the publish, the commit with the session's close;
the order row alone, the event written at publish and at commit, alternating in 5 rounds of
1,500 transactions. Usage: python docs/bench/outbox-at-commit/parts_cpu.py URL (a Postgres
migrated to the framework's head). Prints the medians in µs per transaction."""

from __future__ import annotations

import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from sqlalchemy import create_engine, insert
from sqlalchemy.orm import Session

from outbox.publish import Outbox
from outboxkit.bench import writes
from outboxkit.bench.writes import ITEMS, metadata, orders

engine = create_engine(sys.argv[1], pool_size=1, max_overflow=0)
metadata.create_all(engine)
VARIANTS = {
    "no outbox": None,
    "at publish": writes.publisher(Outbox("delete", at_commit=False)),  # bench outbox's publish
    "at commit": writes.publisher(Outbox("delete")),
}
PARTS = ("order row (session, INSERT)", "publish", "commit + close")
spent: dict[str, dict[str, list[float]]] = {v: {p: [] for p in PARTS} for v in VARIANTS}
for _ in range(5):
    for name, write in VARIANTS.items():
        totals = [0.0, 0.0, 0.0]
        for n in range(1500):
            order_id = str(uuid.uuid4())
            t0 = time.thread_time()
            session = Session(engine)
            session.begin()
            session.execute(insert(orders).values(id=order_id, customer="c", items=ITEMS, amount=n))
            t1 = time.thread_time()
            if write is not None:
                write(session, order_id, n)
            t2 = time.thread_time()
            session.commit()
            session.close()
            t3 = time.thread_time()
            for i, part in enumerate((t1 - t0, t2 - t1, t3 - t2)):
                totals[i] += part
        for part, total in zip(PARTS, totals, strict=True):
            spent[name][part].append(total / 1500 * 1e6)
print("| | " + " | ".join(PARTS) + " |\n|---|---|---|---|")
for name in VARIANTS:
    cells = " | ".join(f"{statistics.median(spent[name][p]):,.0f} µs" for p in PARTS)
    print(f"| {name} | {cells} |")
