"""Each inbox watermark keeps, per source, the history its database lost when it was restored or
failed over and an operator resumed the partition with a new history (``lost_histories``): the
fork and the old top positions, and the new history's first event in the partition. A re-read
of the topic from before that event (a failover to a mirror, a re-created topic) skips the lost
history's records by it; without it, those above the new history's top were applied again.
Existing rows start with none.

Revision ID: 0019_inbox_lost_histories
Revises: 0018_inbox_source_tops
Create Date: 2026-12-07
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0019_inbox_lost_histories"
down_revision = "0018_inbox_source_tops"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "inbox_watermark",
        sa.Column(
            "lost_histories",
            postgresql.JSONB(),
            nullable=False,
            server_default=sa.text("'{}'::jsonb"),
        ),
    )


def downgrade() -> None:
    op.drop_column("inbox_watermark", "lost_histories")
