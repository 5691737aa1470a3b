"""Run the framework migrations against any database, from code or the CLI."""

from __future__ import annotations

import os
from dataclasses import dataclass
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
    """The URL given, else OUTBOXKIT_DATABASE_URL (plain `alembic` runs have no composition root
    to pass it down); fail with a clear message."""
    if url:
        return url
    settings_url = os.environ.get("OUTBOXKIT_DATABASE_URL")
    if not settings_url:
        raise MigrationError(
            "no database URL: set OUTBOXKIT_DATABASE_URL, pass -x url=... to alembic, "
            "or run `outboxkit db upgrade --url ...`"
        )
    return settings_url


@dataclass(frozen=True)
class Migrations:
    """One Alembic script directory and its version table: the framework's, or a service's."""

    location: Path
    version_table: str

    def config(self, url: str) -> Config:
        """An Alembic config for these scripts, bound to ``url``."""
        config = Config()
        config.set_main_option("script_location", str(self.location))
        config.attributes["url"] = url
        config.attributes["version_table"] = self.version_table
        return config

    def upgrade(self, url: str, revision: str = "head") -> None:
        """Bring the database at ``url`` up to ``revision`` (idempotent)."""
        command.upgrade(self.config(url), revision)

    def downgrade(self, url: str, revision: str = "base") -> None:
        """Take the database at ``url`` down to ``revision``."""
        command.downgrade(self.config(url), revision)

    def current(self, url: str) -> str | None:
        """The revision the database is at, or None for an empty database."""
        engine = create_engine(url, poolclass=pool.NullPool)
        try:
            with engine.connect() as connection:
                context = MigrationContext.configure(
                    connection, opts={"version_table": self.version_table}
                )
                return context.get_current_revision()
        finally:
            engine.dispose()

    def head(self) -> str | None:
        """The newest revision in the script directory."""
        return ScriptDirectory.from_config(self.config("unused")).get_current_head()


FRAMEWORK = Migrations(_HERE, VERSION_TABLE)


def alembic_config(url: str) -> Config:
    """An Alembic config for the framework scripts, bound to ``url``."""
    return FRAMEWORK.config(url)


def upgrade(url: str, revision: str = "head") -> None:
    """Bring the database at ``url`` up to ``revision`` of the framework tables (idempotent)."""
    FRAMEWORK.upgrade(url, revision)


def downgrade(url: str, revision: str = "base") -> None:
    """Take the framework tables at ``url`` down to ``revision``."""
    FRAMEWORK.downgrade(url, revision)


def current(url: str) -> str | None:
    """The framework revision the database is at, or None for an empty database."""
    return FRAMEWORK.current(url)


def head() -> str | None:
    """The newest framework revision shipped with the package."""
    return FRAMEWORK.head()
