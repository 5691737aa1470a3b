"""The inbox's watermarks say what their offsets refer to and where each source stands.

Each ``inbox_watermark`` row gets the cluster's and the topic's id its offsets belong to
(``cluster_id``, ``topic_id``; NULL until a consumer job records them: rows of earlier versions
take the ids the job sees next), per source the highest position decided (``sources``), and
why the partition is stopped (``stopped``), and whether it was started over by its sources'
positions (``by_position``: then a record without one stops it) and how many times
(``epoch``). Existing watermarks keep
their meaning: records without a source position are still judged by offset. Parked and
skipped records get the topic id their offset belongs to, and one offset may be parked once per
topic incarnation (a NULL id, the topic's unknown, is one incarnation: NULLS NOT DISTINCT).

Revision ID: 0012_inbox_identity
Revises: 0011_inbox_watermark_parked
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0012_inbox_identity"
down_revision = "0011_inbox_watermark_parked"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("inbox_watermark", sa.Column("cluster_id", sa.String(64), nullable=True))
    op.add_column("inbox_watermark", sa.Column("topic_id", sa.String(64), nullable=True))
    op.add_column(
        "inbox_watermark",
        sa.Column(
            "sources",
            postgresql.JSONB(),
            nullable=False,
            server_default=sa.text("'{}'::jsonb"),
        ),
    )
    op.add_column("inbox_watermark", sa.Column("stopped", sa.Text(), nullable=True))
    op.add_column(
        "inbox_watermark",
        sa.Column("by_position", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    op.add_column(
        "inbox_watermark",
        sa.Column("epoch", sa.Integer(), nullable=False, server_default=sa.text("0")),
    )
    for table in ("inbox_parked", "inbox_skipped"):
        op.add_column(table, sa.Column("topic_id", sa.String(64), nullable=True))
    op.drop_constraint("uq_inbox_parked_offset", "inbox_parked", type_="unique")
    op.create_unique_constraint(
        "uq_inbox_parked_offset",
        "inbox_parked",
        ["consumer", "topic", "partition", "offset", "topic_id"],
        postgresql_nulls_not_distinct=True,
    )


def downgrade() -> None:
    op.drop_constraint("uq_inbox_parked_offset", "inbox_parked", type_="unique")
    op.create_unique_constraint(
        "uq_inbox_parked_offset", "inbox_parked", ["consumer", "topic", "partition", "offset"]
    )
    for table in ("inbox_parked", "inbox_skipped"):
        op.drop_column(table, "topic_id")
    for column in ("epoch", "by_position", "stopped", "sources", "topic_id", "cluster_id"):
        op.drop_column("inbox_watermark", column)
