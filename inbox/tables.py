"""Inbox tables: watermarks, the bounded window of applied event ids, parked records, and the
idempotency keys of HTTP requests."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
    func,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, UUID

metadata = MetaData()

# One row per (consumer, topic, partition): the highest offset applied (or skipped past).
watermarks = Table(
    "inbox_watermark",
    metadata,
    Column("consumer", String(255), nullable=False),
    Column("topic", String(255), nullable=False),
    Column("partition", Integer, nullable=False),
    Column("offset", BigInteger, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("consumer", "topic", "partition"),
)

# Event ids applied within the last `window` offsets of each partition, one row per applied
# slice: its (event id, offset) pairs as parallel arrays in offset order, keyed by its first
# offset. A handful of rows per partition (window / slice size), so the state stays small
# whatever the message count. The ids are UUIDs (`outbox.record.decode` refuses a record whose
# id is not one, and only applied records are remembered), kept as uuid: 16 bytes an id instead
# of 40 as text. That matters because the arrays live in TOAST and pruning deletes a slice per
# batch: until autovacuum visits (eager settings from migration 0005, but at most once per
# naptime) the table holds every id inserted since, so bytes per id set its size on disk.
#
# Nothing in the table refuses a second copy of an id (ids inside arrays have no unique index).
# The invariant that replaces the old primary key on the id: every reader and writer of a
# partition's window (the apply loop, redrive, rewind) holds the partition's watermark row lock
# (`Recorder.lock`, SELECT ... FOR UPDATE) for its whole transaction. Holders are serialised, so
# the ids a transaction reads are all the ids committed before it, and what it decides to apply
# (and remembers) cannot have been applied by a concurrent instance. Anything that touches these
# rows without that lock can apply an event twice.
recent_ids = Table(
    "inbox_recent",
    metadata,
    Column("consumer", String(255), nullable=False),
    Column("topic", String(255), nullable=False),
    Column("partition", Integer, nullable=False),
    Column("first_offset", BigInteger, nullable=False),
    Column("last_offset", BigInteger, nullable=False),
    Column("event_ids", ARRAY(UUID(as_uuid=False)), nullable=False),
    Column("offsets", ARRAY(BigInteger), nullable=False),
    PrimaryKeyConstraint("consumer", "topic", "partition", "first_offset"),
)

parked = Table(
    "inbox_parked",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("consumer", String(255), nullable=False),
    Column("topic", String(255), nullable=False),
    Column("partition", Integer, nullable=False),
    Column("offset", BigInteger, nullable=False),
    Column("key", Text, nullable=True),
    Column("event_id", String(64), nullable=True),
    Column("event_type", String(255), nullable=True),
    Column("headers", JSONB, nullable=True),
    Column("payload", LargeBinary, nullable=True),
    Column("error", Text, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("first_seen", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("last_seen", DateTime(timezone=True), nullable=False, server_default=func.now()),
    UniqueConstraint("consumer", "topic", "partition", "offset", name="uq_inbox_parked_offset"),
    Index("ix_inbox_parked_key", "consumer", "topic", "partition", "key"),
)

# The idempotent receiver of HTTP requests: one row per (route, Idempotency-Key), holding the
# first response, written in the request's transaction (see service_template.uow).
idempotency = Table(
    "service_idempotency",
    metadata,
    Column("scope", String(255), nullable=False),
    Column("key", String(255), nullable=False),
    Column("fingerprint", String(64), nullable=False),
    Column("status_code", Integer, nullable=True),
    Column("response", JSONB, nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("scope", "key"),
    Index("ix_service_idempotency_created", "created_at"),
)
