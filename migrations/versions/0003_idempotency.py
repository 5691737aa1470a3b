"""Idempotency keys of the service template: key, request fingerprint and the first response.

Revision ID: 0003_idempotency
Revises: 0002_inbox
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0003_idempotency"
down_revision = "0002_inbox"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "service_idempotency",
        sa.Column("scope", sa.String(255), nullable=False),
        sa.Column("key", sa.String(255), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("status_code", sa.Integer, nullable=True),
        sa.Column("response", JSONB, nullable=True),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.PrimaryKeyConstraint("scope", "key"),
    )
    op.create_index("ix_service_idempotency_created", "service_idempotency", ["created_at"])


def downgrade() -> None:
    op.drop_table("service_idempotency")
