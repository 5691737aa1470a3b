"""Stock per SKU and shipments (one per order).

Revision ID: shipping_0001
Revises:
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op

revision = "shipping_0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    now = sa.func.now()
    op.create_table(
        "stock",
        sa.Column("sku", sa.String(32), primary_key=True),
        sa.Column("available", sa.Integer, nullable=False),
        sa.CheckConstraint("available >= 0", name="ck_stock_not_negative"),
    )
    op.create_table(
        "shipments",
        sa.Column("order_id", sa.String(36), primary_key=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("items", sa.JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=now),
    )


def downgrade() -> None:
    op.drop_table("shipments")
    op.drop_table("stock")
