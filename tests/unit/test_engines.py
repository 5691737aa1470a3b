"""Engines by role: each role's pool, and no other place in the framework making its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import pool
from sqlalchemy.engine import make_url

from outboxkit.kernel import engines
from outboxkit.kernel.engines import engine_for
from tests.unit.test_layers import MAY_IMPORT, python_files

ROOT = Path(__file__).resolve().parents[2]
URL = "postgresql+psycopg://app@db.internal/orders"
# The application packages, their commands apart, and the benchmarks may make their own.
TOPS = ("outboxkit", "outboxkit_workshop")


def test_each_role_gets_its_pool() -> None:
    assert isinstance(engine_for(URL, "once").pool, pool.NullPool)
    consumer = engine_for(URL, "consumer").pool
    assert isinstance(consumer, pool.QueuePool) and consumer.size() == 2
    assert engine_for(URL, "metrics").pool.size() == 1  # type: ignore[attr-defined]
    service = engine_for(URL, "service", pool_size=7)
    assert service.pool.size() == 7 and service.pool._pre_ping  # type: ignore[attr-defined]
    assert service.pool._max_overflow == 0  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="engine role 'batch'"):
        engine_for(URL, "batch")  # type: ignore[arg-type]


def test_a_services_pools_follow_its_settings() -> None:
    """Both engines of a service app: pool_size connections, no overflow unless the settings
    allow some (each overflow connection is a login per request under load), pinged unless
    they say not to."""
    from service_template import ServiceSettings, create_app

    for given, overflow, ping in (
        ({}, 0, True),
        ({"pool_overflow": 5, "pool_ping": False}, 5, False),
    ):
        settings = ServiceSettings(name="orders", database_url=URL, pool_size=3, **given)
        service = create_app(settings).state.service
        for made in (service.engine.pool, service.async_engine.sync_engine.pool):
            assert made.size() == 3 and made._max_overflow == overflow
            assert made._pre_ping is ping


def test_engines_are_made_in_one_place() -> None:
    makers = [
        path.relative_to(ROOT).as_posix()
        for room in [*(r for r in MAY_IMPORT if r not in TOPS), "outboxkit.commands"]
        for path in python_files(room)
        if "create_engine(" in path.read_text()
    ]
    assert makers == ["outboxkit/kernel/engines.py"]


def test_every_postgres_connection_notices_a_lost_peer_in_bounded_time(monkeypatch):
    seen: dict[str, Any] = {}

    def capture(url: Any, **kwargs: Any) -> None:
        seen.update(kwargs)

    monkeypatch.setattr(engines, "create_engine", capture)
    engines.engine_for("postgresql+psycopg://u@db:5432/x", "service", connect_args={"a": 1})
    args = seen["connect_args"]
    assert args["tcp_user_timeout"] == engines.NETWORK["tcp_user_timeout"]
    assert args["keepalives"] == 1 and args["connect_timeout"] > 0
    assert args["a"] == 1  # the caller's own arguments kept
    seen.clear()
    engines.engine_for("postgresql+psycopg://u@db/x?connect_timeout=3&keepalives=0", "once")
    assert seen["connect_args"]["tcp_user_timeout"] == engines.NETWORK["tcp_user_timeout"]
    assert "connect_timeout" not in seen["connect_args"]  # the URL's own settings win
    assert "keepalives" not in seen["connect_args"]
    seen.clear()  # another Postgres driver (installed where a user names it)
    monkeypatch.setattr(engines, "database_url", lambda url: make_url("postgresql+pg8000://d/x"))
    engines.engine_for("postgresql+pg8000://u@db/x", "once")
    assert "connect_args" not in seen  # libpq's settings only for libpq's drivers


def test_a_consumer_job_s_engines_and_query_name_are_made_by_the_job() -> None:
    # The composition root of the consumer side: `Job.engine` (attached for at-commit
    # publishing) and `query_name`; no module of the package builds them again.
    again = [
        path.relative_to(ROOT).as_posix()
        for path in python_files("spark_consumers")
        if path.name != "job.py"
        and ("engine_for(" in path.read_text() or '"+".join(job.name' in path.read_text())
    ]
    assert again == []
