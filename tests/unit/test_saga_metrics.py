"""The orders service's saga metrics without a database: the families one scrape exposes from
per-status counts, the one statement that reads them (compiled for Postgres), and the collector
registered on the orders app's registry. Read from a real orders table in tests/e2e."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from sqlalchemy.dialects.postgresql import psycopg

from outboxkit_workshop.saga import orders, rules
from outboxkit_workshop.saga.order_metrics import (
    BUCKETS,
    OrdersCollector,
    StatusCount,
    order_families,
    status_counts,
)


def samples(counts: list[StatusCount]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in order_families(counts)
        for s in family.samples
    }


def test_orders_by_status_and_placed_to_final_histogram_per_final_state():
    shipped = StatusCount(rules.SHIPPED, 3, 3, 4.5, [0, 1, 2, 3, 3, 3, 3, 3, 3])
    got = samples([StatusCount(rules.PENDING, 7), shipped])
    assert got[("outboxkit_saga_orders", (("status", rules.PENDING),))] == 7
    assert got[("outboxkit_saga_orders", (("status", rules.SHIPPED),))] == 3
    key = (("status", rules.SHIPPED),)
    assert got[("outboxkit_saga_order_seconds_count", key)] == 3
    assert got[("outboxkit_saga_order_seconds_sum", key)] == 4.5
    assert got[("outboxkit_saga_order_seconds_bucket", (("le", "0.5"), *key))] == 1
    assert got[("outboxkit_saga_order_seconds_bucket", (("le", "+Inf"), *key))] == 3
    # Every final state has a series from the first scrape on (rate() needs its zero).
    cancelled = (("status", rules.CANCELLED),)
    assert got[("outboxkit_saga_order_seconds_count", cancelled)] == 0
    assert not any(
        k[0].startswith("outboxkit_saga_order_seconds") and k[1][-1][1] == "PENDING" for k in got
    )


def test_one_statement_reads_every_status_and_bucket():
    sql = str(status_counts(orders.orders).compile(dialect=psycopg.dialect()))
    assert sql.count("\nFROM orders ") == 1 and "GROUP BY orders.status" in sql
    assert sql.count(
        "FILTER (WHERE EXTRACT(epoch FROM orders.final_at - orders.created_at)"
    ) == len(BUCKETS)


class FailingEngine:
    def connect(self) -> Any:
        raise OSError("connection refused")


def test_an_unreachable_database_leaves_the_series_out_and_the_scrape_succeeds(
    caplog: pytest.LogCaptureFixture,
):
    registry = CollectorRegistry()
    registry.register(OrdersCollector(FailingEngine(), orders.orders))  # type: ignore[arg-type]
    assert b"outboxkit_saga" not in generate_latest(registry)
    assert "order metrics unavailable" in caplog.text


def test_the_orders_app_registers_the_collector(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ORDERS_DATABASE_URL", "postgresql+psycopg://orders@127.0.0.1:1/orders")
    app = orders.app()
    registry = app.state.service.metrics.registry
    collectors = getattr(registry, "_collector_to_names", {})
    assert any(isinstance(c, OrdersCollector) for c in collectors)
