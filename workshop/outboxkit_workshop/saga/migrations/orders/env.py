"""Alembic environment of the orders service's own tables."""

from migrations.environment import run
from outboxkit_workshop.saga.orders import metadata

run("orders_alembic_version", target_metadata=metadata)
