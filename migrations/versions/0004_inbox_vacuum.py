"""Vacuum the inbox's id window eagerly: it is pruned on every batch, so at a steady rate it has
as many dead rows as live ones. Without this, autovacuum's default (20% of the table) lets a
window of 200,000 ids grow to ~290 MB on disk after 1M events (measured by `outboxkit dev bench
inbox`); vacuuming every 10,000 dead rows lets new ids reuse the pruned space.

Revision ID: 0004_inbox_vacuum
Revises: 0003_idempotency
Create Date: 2026-11-22
"""

from alembic import op

revision = "0004_inbox_vacuum"
down_revision = "0003_idempotency"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "ALTER TABLE inbox_recent SET (autovacuum_vacuum_scale_factor = 0.0,"
        " autovacuum_vacuum_threshold = 10000, autovacuum_vacuum_cost_delay = 0)"
    )


def downgrade() -> None:
    op.execute(
        "ALTER TABLE inbox_recent RESET (autovacuum_vacuum_scale_factor,"
        " autovacuum_vacuum_threshold, autovacuum_vacuum_cost_delay)"
    )
