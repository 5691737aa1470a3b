"""The body of an Alembic env.py: the framework's and every service's migrations run through it.

The URL and version table come from the config attributes set by `migrations.runner`, or from
``-x url=...`` and settings when plain `alembic` is used.

``target_metadata`` gives autogenerate (``alembic revision --autogenerate``, ``alembic check``,
`Migrations.check`) the tables the chain owns. One database holds several chains (the
framework's and a service's, each with its own version table), so autogenerate is limited to
the tables of ``target_metadata``: neither chain reports the other's tables, nor any version
table, as drift."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from alembic import context
from sqlalchemy import MetaData

from migrations.runner import VERSION_TABLE, resolve_url
from outboxkit.kernel.engines import engine_for


def _table_names(metadata: MetaData | Sequence[MetaData] | None) -> frozenset[str]:
    if metadata is None:
        return frozenset()
    items = [metadata] if isinstance(metadata, MetaData) else list(metadata)
    return frozenset(table.name for item in items for table in item.tables.values())


def _own_tables_only(tables: frozenset[str]) -> dict[str, Any]:
    """``context.configure`` options that keep autogenerate to ``tables``."""

    def include_name(name: str | None, type_: str, parent_names: Any) -> bool:
        if type_ == "table":
            return name in tables
        return True

    def include_object(
        obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
    ) -> bool:
        if type_ == "table":
            return name in tables
        table = getattr(obj, "table", None)
        return table is None or table.name in tables

    return {"include_name": include_name, "include_object": include_object}


def run(
    version_table: str = VERSION_TABLE,
    target_metadata: MetaData | Sequence[MetaData] | None = None,
) -> None:
    """The body of a chain's Alembic ``env.py``: run the pending migrations of the current script
    directory, online or offline (``alembic upgrade --sql``).

    A service's ``env.py``: ``run("orders_alembic_version", target_metadata=metadata)``.

    Args:
        version_table: The chain's version table, unless the caller (`Migrations`) set one.
        target_metadata: The tables the chain owns (one MetaData or several): what
            autogenerate (``alembic check``, `Migrations.check`) compares the database with.
    """
    config = context.config
    url = resolve_url(
        config.attributes.get("url") or context.get_x_argument(as_dictionary=True).get("url")
    )
    table = config.attributes.get("version_table", version_table)
    options: dict[str, Any] = {
        "version_table": table,
        "target_metadata": (
            list(target_metadata)
            if target_metadata is not None and not isinstance(target_metadata, MetaData)
            else target_metadata
        ),
        "compare_type": True,
        "compare_server_default": True,
        **_own_tables_only(_table_names(target_metadata)),
    }
    if context.is_offline_mode():
        context.configure(url=url, literal_binds=True, **options)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = engine_for(url, "once")
    with engine.connect() as connection:
        context.configure(connection=connection, **options)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()
