"""The benchmarks run on the real stack at small sizes and report what they measured (figures
are never asserted against thresholds: only that every measurement happened and adds up)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from devstack.stack import Stack
from outboxkit.bench import cdc, inbox, profile, writes
from outboxkit.bench.cli import fresh_database

pytestmark = pytest.mark.integration


def test_outbox_and_inbox_benchmarks_measure_every_variant(stack: Stack, tmp_path: Path) -> None:
    url = fresh_database(stack.database_url())
    data, markdown = writes.run(url, tmp_path, transactions=64, reps=1, writers=(1, 4))
    rates = data["transactions_per_second"]
    assert set(rates) == {f"{w} / {v}" for w in (1, 4) for v in writes.VARIANTS}
    assert all(r["samples"] and r["min"] > 0 for r in rates.values())
    assert "| 4 | outbox, delete mode |" in markdown and "| 1 | outbox, message mode |" in markdown
    wal = data["wal_bytes_per_transaction"]
    for w in (1, 4):  # every outbox variant writes more WAL than the business row alone
        base = wal[f"{w} / no outbox"][0]
        assert all(wal[f"{w} / {v}"][0] > base for v in writes.VARIANTS[1:]), wal
    assert all(c[0] > 0 for c in data["client_cpu_us_per_transaction"].values())
    assert Path(data["plots"][0]).stat().st_size > 0

    data, markdown = inbox.run(url, tmp_path, events=400, reps=1, checkpoints=(400, 2000))
    sizes = data["state_size"]
    # The classic inbox keeps a row per message; ours is bounded by partitions x window.
    assert sizes["message-id"][2000]["rows"] == 2000
    assert sizes["inbox"][2000]["rows"] == 2000 + inbox.PARTITIONS
    assert sizes["watermark"][2000]["rows"] == inbox.PARTITIONS
    assert set(data["rows_per_second"]) == set(inbox.VARIANTS)

    data, markdown = profile.run(url, tmp_path, events=400, transactions=50)
    sink, write = data["inbox_sink_seconds"], data["outbox_write_seconds"]
    assert 0 < sink["cpu (profiled)"] <= sink["wall (profiled)"] * 1.05
    assert write["SQLAlchemy (statements, ORM session)"] > 0
    assert "s waiting (" in markdown and "| SQLAlchemy (statements, ORM session) |" in markdown


def test_cdc_benchmark_sees_every_event(stack: Stack, tmp_path: Path) -> None:
    data, _ = cdc.cdc(stack, tmp_path, events=400, reps=1, writers=2)
    rates = data["events_per_second"]
    assert all(r["min"] > 0 for r in rates.values())
    assert data["params"]["record_sizes"][1] > 100  # sized from a real Debezium record
    assert json.dumps(data)  # the report is JSON-ready
    status = stack.connect_client().status(f"{stack.settings.connector_name}-{cdc.DATABASE}")
    assert status is not None and status.running  # resumed after the drain


def test_pipeline_benchmark_applies_each_event_once(
    stack: Stack, spark: object, tmp_path: Path
) -> None:
    data, _ = cdc.pipeline(stack, tmp_path, events=500, reps=1, session=spark)
    assert data["events_per_second"][cdc.PER_EVENT]["min"] > 0
    assert data["events_per_second"][cdc.BATCH]["min"] > 0
    assert all(n >= 1 for n in data["batches"].values())
    assert all("addBatch" in ms for ms in data["micro_batch_ms"].values())
