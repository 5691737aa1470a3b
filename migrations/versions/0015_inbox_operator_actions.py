"""The operator action log: one row per command that destroyed, rewound or redrove state (a
rewind, a rebase, a skip, a redrive, a downgrade that keeps this table): who ran it
(``OUTBOXKIT_OPERATOR``, else the OS user), when, which command, on what target, what it did
(``detail``) and how many things it touched (``count``). Append-only; `outboxkit inbox actions`
lists it newest first through the index on ``at``. A downgrade below this revision drops it.

Revision ID: 0015_inbox_operator_actions
Revises: 0014_inbox_retries
Create Date: 2026-11-28
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0015_inbox_operator_actions"
down_revision = "0014_inbox_retries"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "inbox_operator_action",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("who", sa.String(255), nullable=False),
        sa.Column("command", sa.String(255), nullable=False),
        sa.Column("target", sa.Text, nullable=False),
        sa.Column("detail", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
        sa.Column("count", sa.BigInteger, nullable=True),
    )
    op.create_index("ix_inbox_operator_action_at", "inbox_operator_action", ["at"])


def downgrade() -> None:
    op.drop_index("ix_inbox_operator_action_at", table_name="inbox_operator_action")
    op.drop_table("inbox_operator_action")
