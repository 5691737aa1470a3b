"""Alembic environment of the payments service's own tables."""

from migrations.environment import run

run("payments_alembic_version")
