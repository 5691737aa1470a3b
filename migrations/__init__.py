"""The framework's database migrations (Alembic): its tables brought to head from code, the
``outboxkit db`` CLI or plain ``alembic``; a service's own chain runs through the same
`Migrations` and ``env.py`` body (`run`), with a version table of its own."""

import outboxkit.kernel  # noqa: F401  (first: it refuses packages shadowing the framework's)
from migrations.environment import run
from migrations.runner import (
    FRAMEWORK,
    VERSION_TABLE,
    MigrationError,
    Migrations,
    current,
    downgrade,
    head,
    upgrade,
)

__all__ = [
    "FRAMEWORK",
    "VERSION_TABLE",
    "MigrationError",
    "Migrations",
    "current",
    "downgrade",
    "head",
    "run",
    "upgrade",
]
