"""A partition's watermark row says whether the partition may have parked records
(``inbox_watermark.any_parked``), so the apply loop reads the parked keys of a slice only then:
the lock that reads the watermark returns it, and a partition with nothing parked (nearly every
one, nearly always) saves a round trip and a digest of every key per transaction.

The apply loop sets it when it parks (under the partition's lock); redrive and skip set it
again from what is left. Rows of partitions that have parked records now are set here.

Revision ID: 0011_inbox_watermark_parked
Revises: 0010_inbox_recent_storage
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

revision = "0011_inbox_watermark_parked"
down_revision = "0010_inbox_recent_storage"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "inbox_watermark",
        sa.Column("any_parked", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    op.execute(
        "UPDATE inbox_watermark AS w SET any_parked = true WHERE EXISTS (SELECT 1 FROM"
        " inbox_parked AS p WHERE p.consumer = w.consumer AND p.topic = w.topic"
        " AND p.partition = w.partition)"
    )


def downgrade() -> None:
    op.drop_column("inbox_watermark", "any_parked")
