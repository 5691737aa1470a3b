"""Alembic environment of the shipping service's own tables."""

from migrations.environment import run
from outboxkit_workshop.saga.shipping import metadata

run("shipping_alembic_version", target_metadata=metadata)
