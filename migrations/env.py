"""Alembic environment for the framework tables; the URL comes from settings, never a file."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool

from migrations.runner import VERSION_TABLE, resolve_url

config = context.config
url = resolve_url(
    config.attributes.get("url") or context.get_x_argument(as_dictionary=True).get("url")
)

if context.is_offline_mode():
    context.configure(url=url, literal_binds=True, version_table=VERSION_TABLE)
    with context.begin_transaction():
        context.run_migrations()
else:
    engine = create_engine(url, poolclass=pool.NullPool)
    with engine.connect() as connection:
        context.configure(connection=connection, version_table=VERSION_TABLE)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()
