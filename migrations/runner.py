"""Run the framework migrations against any database, from code or the CLI."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, pool

VERSION_TABLE = "outboxkit_alembic_version"
_HERE = Path(__file__).resolve().parent


class MigrationError(RuntimeError):
    """The database URL is missing or the migrations could not run."""


def resolve_url(url: str | None) -> str:
    """The URL given, else OUTBOXKIT_DATABASE_URL from settings; fail with a clear message."""
    if url:
        return url
    from outboxkit.settings import Settings

    settings_url = Settings().database_url
    if not settings_url:
        raise MigrationError(
            "no database URL: set OUTBOXKIT_DATABASE_URL, pass -x url=... to alembic, "
            "or run `outboxkit db upgrade --url ...`"
        )
    return settings_url


def alembic_config(url: str) -> Config:
    """An Alembic config for the packaged scripts, bound to ``url``."""
    config = Config()
    config.set_main_option("script_location", str(_HERE))
    config.attributes["url"] = url
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Bring the database at ``url`` up to ``revision`` (idempotent)."""
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str = "base") -> None:
    """Take the database at ``url`` down to ``revision``."""
    command.downgrade(alembic_config(url), revision)


def current(url: str) -> str | None:
    """The revision the database is at, or None for an empty database."""
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
            return context.get_current_revision()
    finally:
        engine.dispose()


def head() -> str | None:
    """The newest revision shipped with the package."""
    return ScriptDirectory.from_config(alembic_config("unused")).get_current_head()
