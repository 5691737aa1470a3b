"""The inbox's id window holds one row per applied slice instead of one per event id: the slice's
ids (uuid[]) and offsets as parallel arrays in offset order, keyed by its first offset. The
per-id table reached ~290 MB after 1M events (`outboxkit dev bench inbox`: two indexes repeating the
consumer and topic per id, and the dead rows of pruning every batch); per slice, a partition has
a handful of rows, pruning deletes one of them per batch, and an id takes 16 bytes.

Existing windows are carried over, one row per (consumer, topic, partition) holding all its ids,
so no re-send is forgotten on upgrade; the downgrade unnests them back into per-id rows. Only
UUIDs are carried: every remembered id is one (records whose id is not are never applied), and
any other string could not match a decodable record's id anyway.

Autovacuum (0004 set it for the per-id table): the rows are few and small, the arrays live in the
TOAST table, and autovacuum treats the two separately, so both are vacuumed unthrottled once 200
rows or 500 TOAST chunks (~1 MB) are dead, and the space of pruned slices is reused by the next
ones. Between autovacuum's visits (autovacuum_naptime, a minute by default) the table still
grows by the ids inserted meanwhile: its size follows the message rate, not the message count.

Revision ID: 0005_inbox_recent_slices
Revises: 0004_inbox_vacuum
Create Date: 2026-11-23
"""

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import ARRAY, UUID

revision = "0005_inbox_recent_slices"
down_revision = "0004_inbox_vacuum"
branch_labels = None
depends_on = None

EAGER_VACUUM = (
    "autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 200,"
    " autovacuum_vacuum_cost_delay = 0, toast.autovacuum_vacuum_scale_factor = 0.0,"
    " toast.autovacuum_vacuum_threshold = 500, toast.autovacuum_vacuum_cost_delay = 0"
)
UUID_TEXT = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
# What 0004 set on the per-id table, restored on downgrade.
PER_ID_VACUUM = (
    "autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 10000,"
    " autovacuum_vacuum_cost_delay = 0"
)


def _partition_columns() -> list[sa.Column[Any]]:
    return [
        sa.Column("consumer", sa.String(255), nullable=False),
        sa.Column("topic", sa.String(255), nullable=False),
        sa.Column("partition", sa.Integer, nullable=False),
    ]


def _set_aside(name: str) -> None:
    """Rename the current inbox_recent (and its primary key) to ``name``."""
    op.rename_table("inbox_recent", name)
    op.execute(f"ALTER TABLE {name} RENAME CONSTRAINT inbox_recent_pkey TO {name}_pkey")


def upgrade() -> None:
    _set_aside("inbox_recent_per_id")
    op.create_table(
        "inbox_recent",
        *_partition_columns(),
        sa.Column("first_offset", sa.BigInteger, nullable=False),
        sa.Column("last_offset", sa.BigInteger, nullable=False),
        sa.Column("event_ids", ARRAY(UUID(as_uuid=False)), nullable=False),
        sa.Column("offsets", ARRAY(sa.BigInteger), nullable=False),
        sa.PrimaryKeyConstraint("consumer", "topic", "partition", "first_offset"),
    )
    op.execute(
        'INSERT INTO inbox_recent (consumer, topic, "partition", first_offset, last_offset,'
        " event_ids, offsets)"
        ' SELECT consumer, topic, "partition", min("offset"), max("offset"),'
        ' array_agg(event_id::uuid ORDER BY "offset"), array_agg("offset" ORDER BY "offset")'
        f" FROM inbox_recent_per_id WHERE event_id ~ '{UUID_TEXT}'"
        ' GROUP BY consumer, topic, "partition"'
    )
    op.drop_table("inbox_recent_per_id")
    op.execute(f"ALTER TABLE inbox_recent SET ({EAGER_VACUUM})")


def downgrade() -> None:
    _set_aside("inbox_recent_slices")
    op.create_table(
        "inbox_recent",
        *_partition_columns(),
        sa.Column("event_id", sa.String(64), nullable=False),
        sa.Column("offset", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("consumer", "topic", "partition", "event_id"),
    )
    op.create_index(
        "ix_inbox_recent_offset", "inbox_recent", ["consumer", "topic", "partition", "offset"]
    )
    # An id in two slices (the invariant broken) keeps one row, as the per-id key demands.
    op.execute(
        'INSERT INTO inbox_recent (consumer, topic, "partition", event_id, "offset")'
        ' SELECT s.consumer, s.topic, s."partition", u.event_id::text, u."offset"'
        ' FROM inbox_recent_slices AS s, unnest(s.event_ids, s.offsets) AS u(event_id, "offset")'
        " ON CONFLICT DO NOTHING"
    )
    op.drop_table("inbox_recent_slices")
    op.execute(f"ALTER TABLE inbox_recent SET ({PER_ID_VACUUM})")
