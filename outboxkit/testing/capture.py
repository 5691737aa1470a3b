"""What the harness installs in the database: every outbox row captured as it is inserted, and
the harness clock.

Capture is a trigger, not a patch of Python: an AFTER INSERT trigger on ``outbox`` copies each
row (the payload and the headers as their jsonb text, what the connector reads) into
``outboxkit_harness.captured`` with a sequence number. It fires in delete mode (the row is
inserted, then deleted in the same transaction) and in retain mode alike, for routes, handlers
and the scheduled-message releaser; a rolled-back transaction takes its copies with it. Message
mode writes no row: the harness runs every outbox in delete mode (`outboxkit.testing.build`).

The clock is an offset in ``outboxkit_harness.clock``. Times the application writes from the
database's real clock, a scheduled message's ``deliver_at`` (``now() + delay``) and a delayed
retry's ``retry_at`` (``now() + delay``), are moved onto the harness clock by BEFORE INSERT
triggers that add the offset; the releaser and the retrier are then run with ``now=`` the
harness clock. Without them, a timer set after `Harness.advance` would be due at once.

The harness's objects live in their own schema, which Alembic's comparisons do not read."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine

from outboxkit.kernel.envelope import Envelope
from outboxkit.kernel.wire import TRACEPARENT

SCHEMA = "outboxkit_harness"

INSTALL = f"""
CREATE SCHEMA IF NOT EXISTS {SCHEMA};
CREATE TABLE IF NOT EXISTS {SCHEMA}.captured (
    seq bigserial PRIMARY KEY,
    id uuid NOT NULL,
    aggregatetype text NOT NULL,
    aggregateid text NOT NULL,
    type text NOT NULL,
    payload text NOT NULL,
    traceparent text,
    headers text,
    schema_version integer NOT NULL,
    created_at timestamptz NOT NULL,
    captured_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.clock (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    offset_seconds float8 NOT NULL DEFAULT 0
);
INSERT INTO {SCHEMA}.clock DEFAULT VALUES ON CONFLICT DO NOTHING;
CREATE OR REPLACE FUNCTION {SCHEMA}.capture() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {SCHEMA}.captured (id, aggregatetype, aggregateid, type, payload, traceparent,
        headers, schema_version, created_at)
    VALUES (NEW.id, NEW.aggregatetype, NEW.aggregateid, NEW.type, NEW.payload::text,
        NEW.traceparent, NEW.headers::text, NEW.schema_version, NEW.created_at);
    RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION {SCHEMA}.offset_interval() RETURNS interval LANGUAGE sql STABLE AS
    $$ SELECT make_interval(secs => offset_seconds) FROM {SCHEMA}.clock $$;
CREATE OR REPLACE FUNCTION {SCHEMA}.deliver_on_clock() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.deliver_at := NEW.deliver_at + {SCHEMA}.offset_interval();
    RETURN NEW;
END $$;
CREATE OR REPLACE FUNCTION {SCHEMA}.retry_on_clock() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.retry_at IS NOT NULL THEN
        NEW.retry_at := NEW.retry_at + {SCHEMA}.offset_interval();
    END IF;
    RETURN NEW;
END $$;
DROP TRIGGER IF EXISTS outboxkit_harness_capture ON outbox;
CREATE TRIGGER outboxkit_harness_capture AFTER INSERT ON outbox
    FOR EACH ROW EXECUTE FUNCTION {SCHEMA}.capture();
"""
# (table, column, function): the times moved onto the harness clock, where the table has them.
ON_CLOCK = (
    ("outbox_scheduled", "deliver_at", "deliver_on_clock"),
    ("inbox_parked", "retry_at", "retry_on_clock"),
)
HAS_COLUMN = text(
    "SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() "
    "AND table_name = :table AND column_name = :column"
)
NEW_ROWS = text(
    f"SELECT seq, id, aggregatetype, aggregateid, type, payload, traceparent, headers, "
    f"schema_version, created_at, captured_at FROM {SCHEMA}.captured WHERE seq > :after "
    "ORDER BY seq"
)
LAST_SEQ = text(f"SELECT COALESCE(max(seq), 0) FROM {SCHEMA}.captured")
SET_OFFSET = text(f"UPDATE {SCHEMA}.clock SET offset_seconds = :seconds")
CLOCK = text(f"SELECT now() + {SCHEMA}.offset_interval()")


@dataclass(frozen=True)
class Captured:
    """One outbox row as the trigger copied it.

    Attributes:
        seq: Its place among the captured rows (insert order; the harness runs one
            transaction at a time, so it is also the commit order).
        envelope: The event.
        committed_ms: When it was written, in ms since the epoch: the record's timestamp.
    """

    seq: int
    envelope: Envelope
    committed_ms: int


def install(engine: Engine) -> int:
    """Install the capture trigger and the clock (idempotent); the last sequence number
    captured so far, after which this harness reads."""
    with engine.begin() as conn:
        conn.exec_driver_sql(INSTALL)
        for table, column, function in ON_CLOCK:
            if conn.execute(HAS_COLUMN, {"table": table, "column": column}).first() is None:
                continue  # a framework older than the column: nothing to move
            trigger = f"outboxkit_harness_{column}"
            conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {trigger} ON {table}")
            conn.exec_driver_sql(
                f"CREATE TRIGGER {trigger} BEFORE INSERT ON {table} "
                f"FOR EACH ROW EXECUTE FUNCTION {SCHEMA}.{function}()"
            )
        conn.execute(SET_OFFSET, {"seconds": 0.0})
        return int(conn.execute(LAST_SEQ).scalar_one())


def captured_after(conn: Connection, seq: int) -> list[Captured]:
    """The rows captured after ``seq`` (committed ones: a transaction still open is not seen)."""
    return [_captured(row) for row in conn.execute(NEW_ROWS, {"after": seq})]


def set_offset(engine: Engine, offset: timedelta) -> None:
    """Move the harness clock to the database's clock plus ``offset``."""
    with engine.begin() as conn:
        conn.execute(SET_OFFSET, {"seconds": offset.total_seconds()})


def clock(engine: Engine) -> datetime:
    """The harness clock now: the database's clock plus the offset."""
    with engine.connect() as conn:
        value: datetime = conn.execute(CLOCK).scalar_one()
    return value


def _captured(row: Any) -> Captured:
    headers: dict[str, str] = dict(json.loads(row.headers) or {}) if row.headers else {}
    if row.traceparent:
        headers[TRACEPARENT] = row.traceparent
    envelope = Envelope(
        aggregate_type=row.aggregatetype,
        aggregate_id=row.aggregateid,
        event_type=row.type,
        payload=json.loads(row.payload),
        headers=headers,
        event_id=row.id,
        schema_version=row.schema_version,
        created_at=row.created_at,
    )
    return Captured(row.seq, envelope, int(row.captured_at.timestamp() * 1000))


def envelopes(found: Sequence[Captured]) -> list[Envelope]:
    """The events of ``found``, in capture order."""
    return [c.envelope for c in found]
