"""Outbox table (EventRouter column names) and the heartbeat row for the connector.

Revision ID: 0001_outbox
Revises:
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB, UUID

revision = "0001_outbox"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "outbox",
        sa.Column("id", UUID(as_uuid=True), primary_key=True),
        sa.Column("aggregatetype", sa.String(255), nullable=False),
        sa.Column("aggregateid", sa.String(255), nullable=False),
        sa.Column("type", sa.String(255), nullable=False),
        sa.Column("payload", JSONB, nullable=False),
        sa.Column("traceparent", sa.String(55), nullable=True),
        sa.Column("headers", JSONB, nullable=True),
        sa.Column("schema_version", sa.Integer, nullable=False, server_default=sa.text("1")),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
    )
    # Retained mode deletes by age; the index keeps that cheap.
    op.create_index("ix_outbox_created_at", "outbox", ["created_at"])
    op.create_table(
        "outbox_heartbeat",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column(
            "beat_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.Column("note", sa.Text, nullable=True),
    )
    op.execute(
        "INSERT INTO outbox_heartbeat (id, note) VALUES (1, 'outboxkit connector heartbeat')"
    )


def downgrade() -> None:
    op.drop_table("outbox_heartbeat")
    op.drop_index("ix_outbox_created_at", table_name="outbox")
    op.drop_table("outbox")
