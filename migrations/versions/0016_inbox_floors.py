"""Each inbox watermark keeps, per source, the position at or below which its records are
trusted to be re-reads (``floors``): set when a partition is started over (the positions it had
applied, which the re-read of the topic's new incarnation or mirror repeats) and when
`outboxkit cdc add-partitions` raises a source's floor. Above it, a record whose position is
below its source's in the partition is a re-send only if the window holds its event; else the
source's positions went back and the partition stops. Existing rows get no floor.

Each also keeps, per source name, the identity of the database it first saw under that name
(``source_identities``, from the records' ``sourceIdentity`` header): another database's records
under the same name are kept as a source of their own.

Revision ID: 0016_inbox_floors
Revises: 0015_inbox_operator_actions
Create Date: 2026-11-28
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0016_inbox_floors"
down_revision = "0015_inbox_operator_actions"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for column in ("floors", "source_identities"):
        op.add_column(
            "inbox_watermark",
            sa.Column(
                column, postgresql.JSONB(), nullable=False, server_default=sa.text("'{}'::jsonb")
            ),
        )


def downgrade() -> None:
    op.drop_column("inbox_watermark", "source_identities")
    op.drop_column("inbox_watermark", "floors")
