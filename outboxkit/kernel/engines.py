"""Every database engine the framework makes, in one place, with the pool each role needs.

- ``service``: a service process serving requests. ``pool_size`` connections (the service's
  setting, 10 by default), pinged at checkout: requests run concurrently, one transaction each,
  and the ping finds connections a database restart killed, so an outage is a 503, never a 500.
- ``consumer``: a Spark executor process applying inbox slices. 2 connections, pinged: one task
  per core holds one at a time, and they are reused across micro-batches.
- ``metrics``: a consumer driver's metrics scrape. 1 connection, pinged: scrapes are serialised.
- ``once``: operator commands, migrations, set-up steps and checks. No pool (``NullPool``): a
  connection per use, and nothing left open on the database when the step ends.

Benchmarks size their pools to what they measure and make their own."""

from __future__ import annotations

from typing import Any, Literal

from sqlalchemy import Engine, create_engine, pool
from sqlalchemy.engine import URL

Role = Literal["service", "consumer", "metrics", "once"]

_POOLS: dict[str, dict[str, Any]] = {
    "service": {"pool_size": 10, "pool_pre_ping": True},
    "consumer": {"pool_size": 2, "pool_pre_ping": True},
    "metrics": {"pool_size": 1, "pool_pre_ping": True},
    "once": {"poolclass": pool.NullPool},
}


def engine_for(url: str | URL, role: Role, **options: Any) -> Engine:
    """An engine on ``url`` pooled for ``role``; ``options`` override (e.g. a service's
    ``pool_size``, ``isolation_level``).

    Args:
        url: The database URL (a SQLAlchemy URL or its text).
        role: What the engine serves, which sets its pool: ``service``, ``consumer``,
            ``metrics`` or ``once`` (as above).
        **options: `sqlalchemy.create_engine` arguments, over the role's pool settings.
    """
    if role not in _POOLS:
        raise ValueError(f"engine role {role!r}: one of {', '.join(_POOLS)}")
    return create_engine(url, **{**_POOLS[role], **options})
