"""Parked records keep their raw bytes: key, value, header names and values (bytea, bytea[]) and
the record's timestamp, so nothing about a record can make parking it fail and redrive applies
exactly what arrived; the text columns become readable, bounded copies. Key lookups (held keys,
redrive of one key) go through md5(raw_key), which no key length can break. Records an operator
skips move to inbox_skipped with who, when and why.

Existing parked rows get their raw columns from their text copies (they were stored as UTF-8
text, so nothing is lost converting back).

Revision ID: 0006_inbox_parked_raw
Revises: 0005_inbox_recent_slices
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

revision = "0006_inbox_parked_raw"
down_revision = "0005_inbox_recent_slices"
branch_labels = None
depends_on = None

RAW_COLUMNS = (
    ("raw_key", sa.LargeBinary),
    ("header_names", ARRAY(sa.LargeBinary)),
    ("header_values", ARRAY(sa.LargeBinary)),
    ("timestamp_ms", sa.BigInteger),
)


def upgrade() -> None:
    for name, type_ in RAW_COLUMNS:
        op.add_column("inbox_parked", sa.Column(name, type_, nullable=True))
    op.execute(
        """
        UPDATE inbox_parked AS p
           SET raw_key = convert_to(p.key, 'UTF8'),
               header_names = coalesce(h.names, '{}'),
               header_values = coalesce(h.vals, '{}')
          FROM inbox_parked AS q
          LEFT JOIN LATERAL (
                SELECT array_agg(convert_to(e.key, 'UTF8') ORDER BY e.key) AS names,
                       array_agg(convert_to(e.value, 'UTF8') ORDER BY e.key) AS vals
                  FROM jsonb_each_text(coalesce(q.headers, '{}'::jsonb)) AS e
               ) AS h ON true
         WHERE p.id = q.id
        """
    )
    op.drop_index("ix_inbox_parked_key", table_name="inbox_parked")
    op.create_index(
        "ix_inbox_parked_key",
        "inbox_parked",
        ["consumer", "topic", "partition", sa.text("md5(raw_key)")],
    )
    op.create_table(
        "inbox_skipped",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("consumer", sa.String(255), nullable=False),
        sa.Column("topic", sa.String(255), nullable=False),
        sa.Column("partition", sa.Integer, nullable=False),
        sa.Column("offset", sa.BigInteger, nullable=False),
        sa.Column("raw_key", sa.LargeBinary, nullable=True),
        sa.Column("payload", sa.LargeBinary, nullable=True),
        sa.Column("header_names", ARRAY(sa.LargeBinary), nullable=True),
        sa.Column("header_values", ARRAY(sa.LargeBinary), nullable=True),
        sa.Column("timestamp_ms", sa.BigInteger, nullable=True),
        sa.Column("key", sa.Text, nullable=True),
        sa.Column("event_id", sa.String(64), nullable=True),
        sa.Column("event_type", sa.String(255), nullable=True),
        sa.Column("headers", JSONB, nullable=True),
        sa.Column("error", sa.Text, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column(
            "first_seen", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.Column(
            "last_seen", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.Column(
            "skipped_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.Column("skipped_by", sa.String(255), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("inbox_skipped")
    op.drop_index("ix_inbox_parked_key", table_name="inbox_parked")
    op.create_index(
        "ix_inbox_parked_key", "inbox_parked", ["consumer", "topic", "partition", "key"]
    )
    for name, _ in RAW_COLUMNS:
        op.drop_column("inbox_parked", name)
