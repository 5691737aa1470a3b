"""Alembic environment for the framework tables; the URL comes from settings, never a file."""

from inbox.tables import metadata as inbox_metadata
from migrations.environment import run
from outbox.table import metadata as outbox_metadata

run(target_metadata=[outbox_metadata, inbox_metadata])
