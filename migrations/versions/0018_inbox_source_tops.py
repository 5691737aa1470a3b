"""Each inbox watermark keeps, per source, the event ids decided at the source's top position
(``tops``): one multi-row write gives its rows one position, and a re-send of one of them is
told from a new row by these ids whatever the window of recent ids still holds. Existing rows
start with none; their top events are then judged by the window, as before.

It also keeps what an operator's rewind applies again (``replay_ids``: the events applied
above its target, as far as the window held them, each once more), while the sources'
positions stay (a rewind no longer forgets them, so a failover after it does not take
retained records for new ones, nor a re-send in the rewound offsets for a new event).

Revision ID: 0018_inbox_source_tops
Revises: 0017_inbox_console
Create Date: 2026-12-07
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0018_inbox_source_tops"
down_revision = "0017_inbox_console"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "inbox_watermark",
        sa.Column(
            "tops", postgresql.JSONB(), nullable=False, server_default=sa.text("'{}'::jsonb")
        ),
    )
    op.add_column(
        "inbox_watermark",
        sa.Column(
            "replay_ids", postgresql.JSONB(), nullable=False, server_default=sa.text("'[]'::jsonb")
        ),
    )


def downgrade() -> None:
    op.drop_column("inbox_watermark", "replay_ids")
    op.drop_column("inbox_watermark", "tops")
