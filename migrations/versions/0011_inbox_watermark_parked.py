"""A partition's watermark row says whether the partition may have parked records
(``inbox_watermark.any_parked``), so the apply loop reads the parked keys of a slice only then:
the lock that reads the watermark returns it, and a partition with nothing parked (nearly every
one, nearly always) saves a round trip and a digest of every key per transaction.

A trigger on inbox_parked sets it for every insert, whoever inserts (the apply loop under the
partition's lock, a consumer of an older version during an upgrade, an operator's SQL), so it is
never false while a parked record exists; redrive and skip set it again from what is left, and
a watermark row created later takes it from the parked records there. Rows of partitions that
have parked records now are set here.

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


# Statement-level: one UPDATE per INSERT statement, of the rows not yet marked.
MARK = """
CREATE FUNCTION inbox_parked_mark() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE inbox_watermark AS w SET any_parked = true
    FROM (SELECT DISTINCT consumer, topic, "partition" FROM inserted) AS n
    WHERE w.consumer = n.consumer AND w.topic = n.topic AND w."partition" = n."partition"
      AND NOT w.any_parked;
    RETURN NULL;
END
$$;
CREATE TRIGGER inbox_parked_mark AFTER INSERT ON inbox_parked
    REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION inbox_parked_mark();
"""


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
    op.execute(MARK)


def downgrade() -> None:
    op.execute("DROP TRIGGER inbox_parked_mark ON inbox_parked")
    op.execute("DROP FUNCTION inbox_parked_mark()")
    op.drop_column("inbox_watermark", "any_parked")
