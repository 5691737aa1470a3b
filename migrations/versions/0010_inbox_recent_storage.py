"""Store the inbox window's arrays uncompressed (STORAGE EXTERNAL): a slice of 1,000 ids is a
16 kB uuid[] and an 8 kB bigint[], both past the TOAST threshold, and Postgres ran pglz over them
on every INSERT. Random UUIDs do not compress and the offsets little, yet compressing was most
of the INSERT: medians 4.2-5.8 ms against 2.4-3.4 ms per 1,000-id slice in three interleaved
runs, for ~25% more bytes in a table that holds one window.
Rows written before keep their compression; new rows are stored as they are.

Numbered 0010: 0009 was the reverted BRIN index of the outbox table.

Revision ID: 0010_inbox_recent_storage
Revises: 0008_outbox_write_deleted
Create Date: 2026-11-25
"""

from alembic import op

revision = "0010_inbox_recent_storage"
down_revision = "0008_outbox_write_deleted"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "ALTER TABLE inbox_recent ALTER COLUMN event_ids SET STORAGE EXTERNAL,"
        " ALTER COLUMN offsets SET STORAGE EXTERNAL"
    )


def downgrade() -> None:
    op.execute(
        "ALTER TABLE inbox_recent ALTER COLUMN event_ids SET STORAGE EXTENDED,"
        " ALTER COLUMN offsets SET STORAGE EXTENDED"
    )
