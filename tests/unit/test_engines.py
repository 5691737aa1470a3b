"""Engines by role: each role's pool, and no other place in the framework making its own."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import pool

from outboxkit.kernel.engines import engine_for
from tests.unit.test_layers import MAY_IMPORT, python_files

ROOT = Path(__file__).resolve().parents[2]
URL = "postgresql+psycopg://app@db.internal/orders"


def test_each_role_gets_its_pool() -> None:
    assert isinstance(engine_for(URL, "once").pool, pool.NullPool)
    consumer = engine_for(URL, "consumer").pool
    assert isinstance(consumer, pool.QueuePool) and consumer.size() == 2
    assert engine_for(URL, "metrics").pool.size() == 1  # type: ignore[attr-defined]
    service = engine_for(URL, "service", pool_size=7)
    assert service.pool.size() == 7 and service.pool._pre_ping  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="engine role 'batch'"):
        engine_for(URL, "batch")  # type: ignore[arg-type]


def test_engines_are_made_in_one_place() -> None:
    makers = [
        path.relative_to(ROOT).as_posix()
        for room in [*(r for r in MAY_IMPORT if r != "outboxkit"), "outboxkit.commands"]
        for path in python_files(room)
        if "create_engine(" in path.read_text()
    ]
    assert makers == ["outboxkit/kernel/engines.py"]
