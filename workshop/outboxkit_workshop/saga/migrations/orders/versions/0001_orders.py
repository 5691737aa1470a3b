"""Orders and their timeline.

Revision ID: orders_0001
Revises:
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "orders_0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    now = sa.func.now()
    op.create_table(
        "orders",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("customer", sa.String(64), nullable=False),
        sa.Column("items", JSONB, nullable=False),
        sa.Column("amount", sa.Integer, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=now),
        sa.Column("final_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_orders_status", "orders", ["status"])
    op.create_table(
        "order_timeline",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("order_id", sa.String(36), nullable=False),
        sa.Column("event_id", sa.String(64), nullable=False, unique=True),
        sa.Column("event_type", sa.String(64), nullable=False),
        sa.Column("service", sa.String(32), nullable=False),
        sa.Column("status_after", sa.String(16), nullable=False),
        sa.Column("detail", JSONB, nullable=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False, server_default=now),
    )
    op.create_index("ix_order_timeline_order", "order_timeline", ["order_id"])


def downgrade() -> None:
    op.drop_table("order_timeline")
    op.drop_table("orders")
