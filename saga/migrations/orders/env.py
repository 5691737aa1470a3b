"""Alembic environment of the orders service's own tables."""

from migrations.environment import run

run("orders_alembic_version")
