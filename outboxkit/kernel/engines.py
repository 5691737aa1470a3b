"""Every database engine the framework makes, in one place, with the pool each role needs.

- ``service``: a service process serving requests. ``pool_size`` connections (the service's
  setting, 10 by default), pinged at checkout: requests run concurrently, one transaction each,
  and the ping finds connections a database restart killed, so an outage is a 503, never a 500.
- ``consumer``: a Spark executor process applying inbox slices. 2 connections, pinged: one task
  per core holds one at a time, and they are reused across micro-batches.
- ``metrics``: a consumer driver's metrics scrape. 1 connection, pinged: scrapes are serialised.
- ``once``: operator commands, migrations, set-up steps and checks. No pool (``NullPool``): a
  connection per use, and nothing left open on the database when the step ends.

Every connection to Postgres also notices a lost peer in bounded time (`NETWORK`): a
partition, or a server that ended the connection while its answer could not arrive, turns into
a connection error within about half a minute, which the caller retries (a 503, a batch
retried), instead of a request or a task hanging until the operating system gives up after
hours.

Benchmarks size their pools to what they measure and make their own."""

from __future__ import annotations

from typing import Any, Literal

from sqlalchemy import Engine, create_engine, pool
from sqlalchemy.engine import URL, make_url

Role = Literal["service", "consumer", "metrics", "once"]

# libpq's connection settings: give up connecting after 10 s; probe a connection idle for 10 s
# every 5 s, and drop it after 3 probes unanswered; drop a connection whose sent data stays
# unacknowledged for 20 s (a query or a COMMIT sent into a partition).
# The drivers that hand these to libpq (others take other arguments).
LIBPQ_DRIVERS = ("psycopg", "psycopg2")
NETWORK: dict[str, int] = {
    "connect_timeout": 10,
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 20_000,
}

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
    settings = {**_POOLS[role], **options}
    parsed = make_url(url)
    if parsed.get_backend_name() == "postgresql" and parsed.get_driver_name() in LIBPQ_DRIVERS:
        # What the URL or the caller set wins: these are defaults.
        defaults = {k: v for k, v in NETWORK.items() if k not in parsed.query}
        settings["connect_args"] = {**defaults, **settings.get("connect_args", {})}
    return create_engine(url, **settings)
