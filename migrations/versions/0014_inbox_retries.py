"""Delayed retries of parked records: a record whose handler failed for a passing reason (a
timeout, a lock or serialization conflict, `inbox.RetryLater`) waits in inbox_parked until
``retry_at`` (on the database's clock; NULL: parked for a person, as every parked record was
before), holding its key, and the retrier redrives it then. ``history`` keeps every failure of
a parked (and then skipped) record, ``{"at", "error", "retry_at"}``, oldest first; rows parked
before have none. The retrier finds the due records through a partial index on (consumer,
retry_at): nearly every parked row is left out of it.

Revision ID: 0014_inbox_retries
Revises: 0013_outbox_scheduled
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0014_inbox_retries"
down_revision = "0013_outbox_scheduled"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("inbox_parked", sa.Column("retry_at", sa.DateTime(timezone=True), nullable=True))
    for table in ("inbox_parked", "inbox_skipped"):
        op.add_column(
            table,
            sa.Column("history", JSONB, nullable=False, server_default=sa.text("'[]'::jsonb")),
        )
    op.create_index(
        "ix_inbox_parked_retry",
        "inbox_parked",
        ["consumer", "retry_at"],
        postgresql_where=sa.text("retry_at IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_inbox_parked_retry", table_name="inbox_parked")
    for table in ("inbox_parked", "inbox_skipped"):
        op.drop_column(table, "history")
    op.drop_column("inbox_parked", "retry_at")
