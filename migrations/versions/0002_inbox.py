"""Inbox tables: watermarks, bounded window of applied event ids, parked records.

Revision ID: 0002_inbox
Revises: 0001_outbox
Create Date: 2026-11-22
"""

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0002_inbox"
down_revision = "0001_outbox"
branch_labels = None
depends_on = None


def _partition_columns() -> list[sa.Column[Any]]:
    return [
        sa.Column("consumer", sa.String(255), nullable=False),
        sa.Column("topic", sa.String(255), nullable=False),
        sa.Column("partition", sa.Integer, nullable=False),
    ]


def upgrade() -> None:
    now = sa.func.now()
    op.create_table(
        "inbox_watermark",
        *_partition_columns(),
        sa.Column("offset", sa.BigInteger, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=now),
        sa.PrimaryKeyConstraint("consumer", "topic", "partition"),
    )
    op.create_table(
        "inbox_recent",
        *_partition_columns(),
        sa.Column("event_id", sa.String(64), nullable=False),
        sa.Column("offset", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("consumer", "topic", "partition", "event_id"),
    )
    op.create_index(
        "ix_inbox_recent_offset", "inbox_recent", ["consumer", "topic", "partition", "offset"]
    )
    op.create_table(
        "inbox_parked",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        *_partition_columns(),
        sa.Column("offset", sa.BigInteger, nullable=False),
        sa.Column("key", sa.Text, nullable=True),
        sa.Column("event_id", sa.String(64), nullable=True),
        sa.Column("event_type", sa.String(255), nullable=True),
        sa.Column("headers", JSONB, nullable=True),
        sa.Column("payload", sa.LargeBinary, nullable=True),
        sa.Column("error", sa.Text, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("first_seen", sa.DateTime(timezone=True), nullable=False, server_default=now),
        sa.Column("last_seen", sa.DateTime(timezone=True), nullable=False, server_default=now),
        sa.UniqueConstraint(
            "consumer", "topic", "partition", "offset", name="uq_inbox_parked_offset"
        ),
    )
    op.create_index(
        "ix_inbox_parked_key", "inbox_parked", ["consumer", "topic", "partition", "key"]
    )


def downgrade() -> None:
    op.drop_table("inbox_parked")
    op.drop_table("inbox_recent")
    op.drop_table("inbox_watermark")
