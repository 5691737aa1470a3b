"""Alembic environment of the shipping service's own tables."""

from migrations.environment import run

run("shipping_alembic_version")
