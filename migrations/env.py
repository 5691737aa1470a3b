"""Alembic environment for the framework tables; the URL comes from settings, never a file.

The chain also creates the service template's idempotency table (revision 0003), declared with
the template (`service_template.idempotency`, a layer above) and compared with the chain by
`tests/integration/test_alembic_check.py`."""

from inbox.tables import metadata as inbox_metadata
from migrations.environment import run
from outbox.table import metadata as outbox_metadata

run(target_metadata=[outbox_metadata, inbox_metadata])
