"""Scheduled messages: events written in the caller's transaction that reach the outbox, and so
Kafka, no earlier than their time on the database's clock (`outbox.scheduled`).

A releaser moves each due row into the outbox in one transaction (delete here, write there), so a
scheduled message is released once whatever crashes. ``key``, chosen by the caller, names at most
one pending message, so a later transaction can cancel it (or schedule it again, replacing it).

Revision ID: 0013_outbox_scheduled
Revises: 0012_inbox_identity
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB, UUID

revision = "0013_outbox_scheduled"
down_revision = "0012_inbox_identity"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "outbox_scheduled",
        sa.Column("id", UUID(as_uuid=True), primary_key=True),
        sa.Column("aggregatetype", sa.String(255), nullable=False),
        sa.Column("aggregateid", sa.String(255), nullable=False),
        sa.Column("type", sa.String(255), nullable=False),
        sa.Column("payload", JSONB, nullable=False),
        sa.Column("traceparent", sa.String(55), nullable=True),
        sa.Column("headers", JSONB, nullable=True),
        sa.Column("schema_version", sa.Integer, nullable=False, server_default=sa.text("1")),
        sa.Column("deliver_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("key", sa.String(255), nullable=True),
        # Scheduling order: messages due at the same time are released in the order scheduled.
        sa.Column("seq", sa.BigInteger, sa.Identity(always=True), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
    )
    # The releaser reads the due rows in their order; cancelling finds a row by its key.
    op.create_index("ix_outbox_scheduled_due", "outbox_scheduled", ["deliver_at", "seq"])
    op.create_index(
        "ux_outbox_scheduled_key",
        "outbox_scheduled",
        ["key"],
        unique=True,
        postgresql_where=sa.text("key IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_table("outbox_scheduled")
