"""Every database engine the framework makes, in one place, with the pool each role needs.

- ``service``: a service process serving requests. ``pool_size`` connections (the service's
  setting, 10 by default), pinged at checkout: requests run concurrently, one transaction each,
  and the ping finds connections a database restart killed, so an outage is a 503, never a 500.
  No overflow by default: a connection opened beyond the pool under a burst is closed when
  given back while ``pool_size`` are idle, so requests above the pool each paid a login (the
  service's ``pool_overflow`` setting allows some, for routes that hold two connections).
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

Every URL passes through `database_url` first (engines, settings, passwords from files): the plain
Postgres schemes, ``postgresql://`` and ``postgres://``, mean the framework's driver, psycopg 3.

Benchmarks size their pools to what they measure and make their own."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy import Engine, create_engine, pool
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

Role = Literal["service", "consumer", "metrics", "once"]

# libpq's connection settings: give up connecting after 10 s; probe a connection idle for 10 s
# every 5 s, and drop it after 3 probes unanswered; drop a connection whose sent data stays
# unacknowledged for 20 s (a query or a COMMIT sent into a partition).
# The drivers that hand these to libpq (others take other arguments).
LIBPQ_DRIVERS = ("psycopg", "psycopg_async", "psycopg2")
NETWORK: dict[str, int] = {
    "connect_timeout": 10,
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 20_000,
}

# The schemes that name Postgres but no driver (libpq's spelling, and the one of Heroku's and
# many providers' URLs): SQLAlchemy would load psycopg2 for the first and fail on the second.
PLAIN_POSTGRES = ("postgresql", "postgres")
POSTGRES_DRIVER = "psycopg"
DATABASE_URL_FORM = "postgresql+psycopg://user@host:5432/database (no password in it)"

_POOLS: dict[str, dict[str, Any]] = {
    "service": {"pool_size": 10, "max_overflow": 0, "pool_pre_ping": True},
    "consumer": {"pool_size": 2, "pool_pre_ping": True},
    "metrics": {"pool_size": 1, "pool_pre_ping": True},
    "once": {"poolclass": pool.NullPool},
}


class DatabaseUrlError(ValueError):
    """A database URL that cannot be parsed, or names a database SQLAlchemy does not know."""


def database_url(url: str | URL) -> URL:
    """``url`` parsed, its plain Postgres scheme (``postgresql://``, ``postgres://``) turned into
    psycopg 3's (``postgresql+psycopg://``); another Postgres driver as given, once it is
    installed.

    Raises:
        DatabaseUrlError: ``url`` is not a URL, names a database other than Postgres (the outbox
            and the inbox use Postgres's JSONB, logical messages and locks), or a driver that is
            not installed.
    """
    try:
        parsed = make_url(url)
    except ArgumentError as exc:  # never echo the text: it may hold a password
        raise DatabaseUrlError(f"not a database URL; expected {DATABASE_URL_FORM}") from exc
    backend, _, driver = parsed.drivername.partition("+")
    if backend in PLAIN_POSTGRES:
        parsed = parsed.set(drivername=f"postgresql+{driver or POSTGRES_DRIVER}")
    if backend not in PLAIN_POSTGRES:
        raise DatabaseUrlError(
            f"{parsed.drivername!r} is not Postgres, the only database outboxkit runs on; "
            f"expected {DATABASE_URL_FORM}"
        )
    try:
        dialect = parsed.get_dialect()
    except ArgumentError as exc:
        raise DatabaseUrlError(
            f"unknown Postgres driver {parsed.drivername!r}; expected {DATABASE_URL_FORM}"
        ) from exc
    try:
        dialect.import_dbapi()
    except ImportError as exc:
        missing = exc.name or dialect.driver
        raise DatabaseUrlError(
            f"the driver of {parsed.drivername!r} is not installed (no module {missing!r}): "
            f"install it, or use {DATABASE_URL_FORM}, whose driver outboxkit installs"
        ) from None
    return parsed


def database_url_setting(value: str | None) -> str | None:
    """A settings field's database URL as `database_url` reads it; None when unset or empty."""
    if not value:
        return None
    return database_url(value).render_as_string(hide_password=False)


def engine_for(url: str | URL, role: Role, **options: Any) -> Engine:
    """An engine on ``url`` pooled for ``role``; ``options`` override (e.g. a service's
    ``pool_size``, ``isolation_level``).

    Args:
        url: The database URL (a SQLAlchemy URL or its text; see `database_url`).
        role: What the engine serves, which sets its pool: ``service``, ``consumer``,
            ``metrics`` or ``once`` (as above).
        **options: `sqlalchemy.create_engine` arguments, over the role's pool settings.
    """
    parsed, settings = _engine_settings(url, role, options)
    return create_engine(parsed, **settings)


def async_engine_for(url: str | URL, role: Role, **options: Any) -> AsyncEngine:
    """`engine_for`'s AsyncEngine, for ``async`` services: the same pools and network settings;
    ``postgresql+psycopg://`` runs on psycopg's async driver (``postgresql+asyncpg://`` on
    asyncpg).

    Args:
        url: The database URL (a SQLAlchemy URL or its text; see `database_url`).
        role: What the engine serves, which sets its pool (see `engine_for`).
        **options: `sqlalchemy.ext.asyncio.create_async_engine` arguments, over the role's.
    """
    from sqlalchemy.ext.asyncio import create_async_engine  # asyncio only where it is used

    parsed, settings = _engine_settings(url, role, options)
    return create_async_engine(parsed, **settings)


def _engine_settings(
    url: str | URL, role: Role, options: dict[str, Any]
) -> tuple[URL, dict[str, Any]]:
    """The parsed URL and the engine's settings: the role's pool, libpq's network defaults."""
    if role not in _POOLS:
        raise ValueError(f"engine role {role!r}: one of {', '.join(_POOLS)}")
    settings = {**_POOLS[role], **options}
    parsed = database_url(url)
    if parsed.get_backend_name() == "postgresql" and parsed.get_driver_name() in LIBPQ_DRIVERS:
        # What the URL or the caller set wins: these are defaults.
        defaults = {k: v for k, v in NETWORK.items() if k not in parsed.query}
        settings["connect_args"] = {**defaults, **settings.get("connect_args", {})}
    return parsed, settings
