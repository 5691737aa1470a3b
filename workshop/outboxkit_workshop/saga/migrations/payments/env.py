"""Alembic environment of the payments service's own tables."""

from migrations.environment import run
from outboxkit_workshop.saga.payments import metadata

run("payments_alembic_version", target_metadata=metadata)
