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
from sqlalchemy.dialects.postgresql import JSONB

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

# Event ids applied within the last `window` offsets of each partition. The primary key is the
# last line against a duplicate effect: a second insert of the same id aborts the transaction.
recent_ids = Table(
    "inbox_recent",
    metadata,
    Column("consumer", String(255), nullable=False),
    Column("topic", String(255), nullable=False),
    Column("partition", Integer, nullable=False),
    Column("event_id", String(64), nullable=False),
    Column("offset", BigInteger, nullable=False),
    PrimaryKeyConstraint("consumer", "topic", "partition", "event_id"),
    Index("ix_inbox_recent_offset", "consumer", "topic", "partition", "offset"),
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
