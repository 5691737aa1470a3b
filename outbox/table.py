"""The outbox table, with the column names Debezium's outbox EventRouter expects by default."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Identity,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, UUID

metadata = MetaData()

outbox_table = Table(
    "outbox",
    metadata,
    # EventRouter defaults: id, aggregatetype, aggregateid, type, payload.
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("aggregatetype", String(255), nullable=False),
    Column("aggregateid", String(255), nullable=False),
    Column("type", String(255), nullable=False),
    Column("payload", JSONB, nullable=False),
    # Ours, each placed into a Kafka header by the connector config.
    Column("traceparent", String(55), nullable=True),
    Column("headers", JSONB(none_as_null=True), nullable=True),
    Column("schema_version", Integer, nullable=False, server_default=text("1")),
    Column(
        "created_at", DateTime(timezone=True), nullable=False, server_default=func.now(), index=True
    ),
)

# Touched by the connector's heartbeat query so that an idle database still moves its slot on.
outbox_heartbeat_table = Table(
    "outbox_heartbeat",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("beat_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("note", Text, nullable=True),
)

# Scheduled messages (`outbox.scheduled`): an outbox row's columns, held until ``deliver_at`` on
# the database's clock, then moved into the outbox by a releaser. ``key``: the caller's name for
# the message, to cancel or replace it (unique among the pending ones).
outbox_scheduled_table = Table(
    "outbox_scheduled",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("aggregatetype", String(255), nullable=False),
    Column("aggregateid", String(255), nullable=False),
    Column("type", String(255), nullable=False),
    Column("payload", JSONB, nullable=False),
    Column("traceparent", String(55), nullable=True),
    Column("headers", JSONB(none_as_null=True), nullable=True),
    Column("schema_version", Integer, nullable=False, server_default=text("1")),
    Column("deliver_at", DateTime(timezone=True), nullable=False),
    Column("key", String(255), nullable=True),
    # Messages due at the same time are released in the order they were scheduled.
    Column("seq", BigInteger, Identity(always=True), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Index("ix_outbox_scheduled_due", "deliver_at", "seq"),
    Index(
        "ux_outbox_scheduled_key",
        "key",
        unique=True,
        postgresql_where=text("key IS NOT NULL"),
    ),
)
