"""The orders POST path in one process: the event written at publish, at commit, and at publish
with the connection events removed, alternating in rounds of 300 POSTs (FastAPI's TestClient,
the client's CPU included). Usage: python docs/bench/outbox-at-commit/post_inprocess.py URL
(URL: a Postgres database migrated to the framework's head; the orders chain is applied)."""

from __future__ import annotations

import logging
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
URL = sys.argv[1]
os.environ["ORDERS_DATABASE_URL"] = URL
os.environ["ORDERS_LOG_JSON"] = "false"
logging.disable(logging.INFO)

from fastapi.testclient import TestClient  # noqa: E402
from sqlalchemy import Engine, event  # noqa: E402

import outbox.at_commit as at_commit  # noqa: E402
from saga import orders  # noqa: E402
from saga.common import migrations_of  # noqa: E402

EVENTS = [
    ("commit", at_commit._on_commit),
    ("prepare_twophase", at_commit._on_prepare),
    ("savepoint", at_commit._on_savepoint),
    ("rollback_savepoint", at_commit._on_rollback_savepoint),
    ("rollback", at_commit._on_rollback),
]
BODY = {"customer": "cust-1", "items": [{"sku": "widget", "qty": 1}], "amount": 40}
DEFER = at_commit.defer


def arrange(variant: str) -> None:
    at_commit.defer = DEFER if variant == "at commit" else (lambda session, rows: False)
    listening = event.contains(Engine, "commit", at_commit._on_commit)
    for name, fn in EVENTS:
        if variant == "no connection events" and listening:
            event.remove(Engine, name, fn)
        elif variant != "no connection events" and not listening:
            event.listen(Engine, name, fn)


migrations_of("orders").upgrade(URL)
runs: dict[str, list[float]] = {"at publish": [], "at commit": [], "no connection events": []}
with TestClient(orders.app()) as client:
    for _ in range(50):
        client.post("/orders", json=BODY, headers={"Idempotency-Key": str(uuid.uuid4())})
    for _ in range(6):
        for variant in runs:
            arrange(variant)
            started = time.process_time()
            for _ in range(300):
                key = {"Idempotency-Key": str(uuid.uuid4())}
                assert client.post("/orders", json=BODY, headers=key).status_code in (200, 201)
            runs[variant].append((time.process_time() - started) / 300 * 1e3)
print("| variant | CPU ms/POST, median of 6 (min-max) |\n|---|---|")
for variant, samples in runs.items():
    low, middle, high = min(samples), statistics.median(samples), max(samples)
    print(f"| {variant} | {middle:.2f} ({low:.2f}-{high:.2f}) |")
