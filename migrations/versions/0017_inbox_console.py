"""What the operator console reads, indexed: each parked record's cause (its error's first line
with ids, quoted text and numbers replaced by placeholders, a column Postgres computes on every
insert and update) indexed per consumer, with each record's last failure and id, so that parked
records group by cause from the index alone; parked and skipped records by event id (the
console's search); and the operator action log by the request that made an action, so that a
request sent twice acts once.

Revision ID: 0017_inbox_console
Revises: 0016_inbox_floors
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0017_inbox_console"
down_revision = "0016_inbox_floors"
branch_labels = None
depends_on = None

# The cause's expression as `inbox.tables.CAUSE` had it at this revision (a migration keeps
# its own copy: the model may change later, this revision's column may not).
CAUSE = (
    "left(regexp_replace(regexp_replace(regexp_replace(regexp_replace("
    "split_part(error, E'\\n', 1), "
    "'^(held behind a parked record of key ).*$', '\\1<key>'), "
    "'[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}', '<id>', 'g'), "
    "'''[^'']*''|\"[^\"]*\"', '<text>', 'g'), "
    "'\\m[0-9]+(\\.[0-9]+)?\\M', '<n>', 'g'), 300)"
)


def upgrade() -> None:
    op.add_column("inbox_parked", sa.Column("cause", sa.Text, sa.Computed(CAUSE, persisted=True)))
    op.create_index(
        "ix_inbox_parked_cause",
        "inbox_parked",
        ["consumer", "cause"],
        postgresql_include=["last_seen", "id"],
    )
    op.create_index("ix_inbox_parked_event", "inbox_parked", ["event_id"])
    op.create_index("ix_inbox_skipped_event", "inbox_skipped", ["event_id"])
    op.create_index(
        "ix_inbox_operator_action_request",
        "inbox_operator_action",
        [sa.text("(detail ->> 'request')")],
        postgresql_where=sa.text("detail ? 'request'"),
    )


def downgrade() -> None:
    op.drop_index("ix_inbox_operator_action_request", table_name="inbox_operator_action")
    op.drop_index("ix_inbox_skipped_event", table_name="inbox_skipped")
    op.drop_index("ix_inbox_parked_event", table_name="inbox_parked")
    op.drop_index("ix_inbox_parked_cause", table_name="inbox_parked")
    op.drop_column("inbox_parked", "cause")
