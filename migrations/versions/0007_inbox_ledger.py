"""The inbox ledger: an opt-in, append-only record of every event a consumer applied (which
event, from which offset, when), for `outboxkit audit` to find events lost or applied twice.

Revision ID: 0007_inbox_ledger
Revises: 0006_inbox_parked_raw
Create Date: 2026-11-24
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import UUID

revision = "0007_inbox_ledger"
down_revision = "0006_inbox_parked_raw"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "inbox_ledger",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("consumer", sa.String(255), nullable=False),
        sa.Column("topic", sa.String(255), nullable=False),
        sa.Column("partition", sa.Integer, nullable=False),
        sa.Column("offset", sa.BigInteger, nullable=False),
        sa.Column("event_id", UUID(as_uuid=False), nullable=False),
        sa.Column(
            "applied_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
    )
    op.create_index("ix_inbox_ledger_consumer_event", "inbox_ledger", ["consumer", "event_id"])


def downgrade() -> None:
    op.drop_index("ix_inbox_ledger_consumer_event", table_name="inbox_ledger")
    op.drop_table("inbox_ledger")
