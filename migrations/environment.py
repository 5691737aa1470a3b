"""The body of an Alembic env.py: the framework's and every service's migrations run through it.

The URL and version table come from the config attributes set by `migrations.runner`, or from
``-x url=...`` and settings when plain `alembic` is used."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool

from migrations.runner import VERSION_TABLE, resolve_url


def run(version_table: str = VERSION_TABLE) -> None:
    """Run the pending migrations of the current script directory."""
    config = context.config
    url = resolve_url(
        config.attributes.get("url") or context.get_x_argument(as_dictionary=True).get("url")
    )
    table = config.attributes.get("version_table", version_table)
    if context.is_offline_mode():
        context.configure(url=url, literal_binds=True, version_table=table)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_engine(url, poolclass=pool.NullPool)
    with engine.connect() as connection:
        context.configure(connection=connection, version_table=table)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()
