"""Alembic environment for the framework tables; the URL comes from settings, never a file."""

from migrations.environment import run

run()
