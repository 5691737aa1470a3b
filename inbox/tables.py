"""Inbox tables: watermarks, the bounded window of applied event ids, parked and skipped records,
the ledger, and the operator action log."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Computed,
    DateTime,
    Identity,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, UUID

metadata = MetaData()

# One row per (consumer, topic, partition): the highest offset applied (or skipped past), what
# those offsets refer to (the cluster's id and the topic's id, KIP-516: NULL until a consumer
# job told; a re-created topic or another cluster has other ids), per source the highest
# position decided (`inbox.position`: {"<source>": [commit LSN, change LSN]}), why the partition
# is stopped (NULL while it runs), and whether the partition may have parked records (set by
# a trigger on every insert into inbox_parked, migration 0011; set again from what is left by
# redrive and skip; never false while one is there), which spares the apply loop the
# parked-key lookup when it is false.
watermarks = Table(
    "inbox_watermark",
    metadata,
    Column("consumer", String(255), nullable=False),
    Column("topic", String(255), nullable=False),
    Column("partition", Integer, nullable=False),
    Column("offset", BigInteger, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("any_parked", Boolean, nullable=False, server_default=false()),
    Column("cluster_id", String(64), nullable=True),
    Column("topic_id", String(64), nullable=True),
    Column("sources", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("stopped", Text, nullable=True),
    # True once the partition was started over by its sources' positions: a record it cannot
    # judge by position (none, or a new source) stops it instead of being taken by its offset.
    Column("by_position", Boolean, nullable=False, server_default=false()),
    # Counts the start-overs: a consumer query started before the last one is refused (its
    # reader may be in the middle of the new topic).
    Column("epoch", Integer, nullable=False, server_default=text("0")),
    # Per source, the position at or below which a record is a re-read (of a partition started
    # over, or given a floor before partitions were added): skipped by position alone. Above
    # it, a position lower than its source's is a re-send only if the window holds its event.
    Column("floors", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    # Per source name, the identity of the database first seen under it (`sourceIdentity`):
    # another database under the name is kept as a source of its own (`inbox.position`).
    Column("source_identities", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    # Per source, the event ids decided at its top position (`sources`): the rows of one
    # multi-row write share a position, and a re-send of one of them is told from a new row by
    # these ids, whatever the window keeps (`inbox.judgement.SourceState.at_top`).
    Column("tops", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    # An operator's rewind: the events applied at offsets above its target, as far as the window
    # held them, each applied once more the next time it is read above the watermark (also after
    # a start-over); every other record is judged as usual.
    Column("replay_ids", JSONB, nullable=False, server_default=text("'[]'::jsonb")),
    # Per source, the history its database lost in a restore or failover that an operator
    # resumed with a new history (`inbox.judgement.Lost`): the fork and old top positions, the
    # new history's first event here, and whether a re-read is still before it.
    Column("lost_histories", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    PrimaryKeyConstraint("consumer", "topic", "partition"),
)

# Event ids applied within the last `window` offsets of each partition, one row per applied
# slice: its (event id, offset) pairs as parallel arrays in offset order, keyed by its first
# offset. A handful of rows per partition (window / slice size), so the state stays small
# whatever the message count. The ids are UUIDs (`outboxkit.kernel.wire.record.decode` refuses a
# record whose id is not one, and only applied records are remembered), kept as uuid: 16 bytes an id
# instead of 40 as text. That matters because the arrays live in TOAST and pruning deletes a slice
# per batch: until autovacuum visits (eager settings from migration 0005, but at most once per
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

# Readable copies of a parked record's text fields are cut to these many characters (the raw
# bytes beside them are whole).
KEY_CHARS = 1000
EVENT_ID_CHARS = 64
EVENT_TYPE_CHARS = 255
HEADER_NAME_CHARS = 255
HEADER_VALUE_CHARS = 1000
HEADERS_SHOWN = 100
ERROR_CHARS = 4000


def _record_columns() -> list[Column[Any]]:
    """A parked record's columns: where it came from, its raw bytes (nothing about them can
    make the insert fail: bytea, bytea[]), readable bounded copies, and why it is not applied."""
    return [
        Column("consumer", String(255), nullable=False),
        Column("topic", String(255), nullable=False),
        Column("partition", Integer, nullable=False),
        Column("offset", BigInteger, nullable=False),
        # The topic id (KIP-516) its offset belongs to, when the consumer knew it: a re-created
        # topic parks its own records at offsets an older incarnation's may still hold.
        Column("topic_id", String(64), nullable=True),
        # The record as it came, byte for byte: what redrive applies.
        Column("raw_key", LargeBinary, nullable=True),
        Column("payload", LargeBinary, nullable=True),  # the record's value
        Column("header_names", ARRAY(LargeBinary), nullable=True),  # UTF-8, in record order
        Column("header_values", ARRAY(LargeBinary), nullable=True),  # same order, NULLs kept
        Column("timestamp_ms", BigInteger, nullable=True),
        # Readable copies (`outboxkit.kernel.wire.record.readable`): escapes for what text cannot
        # hold, cut.
        Column("key", Text, nullable=True),
        Column("event_id", String(EVENT_ID_CHARS), nullable=True),
        Column("event_type", String(EVENT_TYPE_CHARS), nullable=True),
        Column("headers", JSONB, nullable=True),
        Column("error", Text, nullable=False),
        Column("attempts", Integer, nullable=False),
        Column("first_seen", DateTime(timezone=True), nullable=False, server_default=func.now()),
        Column("last_seen", DateTime(timezone=True), nullable=False, server_default=func.now()),
        # Each failure, oldest first: {"at", "error", "retry_at"} (`inbox.retries`); empty for
        # a record held behind its key.
        Column("history", JSONB, nullable=False, server_default=text("'[]'::jsonb")),
    ]


# A parked record's cause: the first line of its error with what differs between records of one
# failure (event ids, quoted text, numbers, the key a record is held behind) replaced by
# placeholders, computed by Postgres on every insert and update: the console groups parked
# records by it, through an index, as ServicePulse groups failed messages.
CAUSE = (
    "left(regexp_replace(regexp_replace(regexp_replace(regexp_replace("
    "split_part(error, E'\\n', 1), "
    "'^(held behind a parked record of key ).*$', '\\1<key>'), "
    "'[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}', '<id>', 'g'), "
    "'''[^'']*''|\"[^\"]*\"', '<text>', 'g'), "
    "'\\m[0-9]+(\\.[0-9]+)?\\M', '<n>', 'g'), 300)"
)

# Records not applied: undecodable, of an unknown type, whose handler kept failing, or held
# behind one of those of the same key. Later records of a parked key are held until the key is
# redriven, so per-key order survives. The key lookups go through md5(raw_key): a b-tree entry
# of the raw key itself would refuse keys longer than a third of a page. A record whose handler
# failed for a passing reason waits for its delayed retry (``retry_at``, on the database's
# clock; NULL: parked for a person), found by the retrier through the partial index.
parked = Table(
    "inbox_parked",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    *_record_columns(),
    Column("retry_at", DateTime(timezone=True), nullable=True),
    Column("cause", Text, Computed(CAUSE, persisted=True)),
    UniqueConstraint(
        "consumer",
        "topic",
        "partition",
        "offset",
        "topic_id",
        name="uq_inbox_parked_offset",
        postgresql_nulls_not_distinct=True,
    ),
)
Index(
    "ix_inbox_parked_key",
    parked.c.consumer,
    parked.c.topic,
    parked.c.partition,
    func.md5(parked.c.raw_key),
)
# The console's failure groups: count, newest failure and an example per cause, from the index
# alone.
Index(
    "ix_inbox_parked_cause",
    parked.c.consumer,
    parked.c.cause,
    postgresql_include=["last_seen", "id"],
)
Index("ix_inbox_parked_event", parked.c.event_id)
Index(
    "ix_inbox_parked_retry",
    parked.c.consumer,
    parked.c.retry_at,
    postgresql_where=parked.c.retry_at.is_not(None),
)

# Parked records an operator chose not to apply (`outboxkit inbox skip`): moved here whole, with
# who skipped them, when and why; their key is no longer held.
skipped = Table(
    "inbox_skipped",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=False),  # its id when parked
    *_record_columns(),
    Column("skipped_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("skipped_by", String(255), nullable=False),
    Column("reason", Text, nullable=False),
)

Index("ix_inbox_skipped_event", skipped.c.event_id)

# The ledger (opt-in: `Inbox.ledger`, a job's `ledger`): one row per event applied, written in
# the transaction that applied it, never updated or deleted by the inbox. It grows with the
# message count, which is why it is off by default; `outboxkit audit` compares it with the
# topics to find events lost (published, passed by the watermark, never applied nor parked) or
# applied twice (two rows of one event id). Nothing here refuses a second row of an id on
# purpose: a duplicate effect must show, not fail the transaction that made it.
ledger = Table(
    "inbox_ledger",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("consumer", String(255), nullable=False),
    Column("topic", String(255), nullable=False),
    Column("partition", Integer, nullable=False),
    Column("offset", BigInteger, nullable=False),
    Column("event_id", UUID(as_uuid=False), nullable=False),
    Column("applied_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Index("ix_inbox_ledger_consumer_event", "consumer", "event_id"),
)

# The operator action log (migration 0015): one row per command that destroyed, rewound or
# redrove state (`outboxkit inbox rewind|rebase|skip|redrive`, `outboxkit db downgrade`): who,
# when, which command, its target, what it did and how many things it touched. Append-only;
# `outboxkit inbox actions` lists it, newest first.
operator_actions = Table(
    "inbox_operator_action",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("who", String(255), nullable=False),
    Column("command", String(255), nullable=False),
    Column("target", Text, nullable=False),
    Column("detail", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("count", BigInteger, nullable=True),
    Index("ix_inbox_operator_action_at", "at"),
    # The console's request token: a request sent twice (a double click) acts once.
    Index(
        "ix_inbox_operator_action_request",
        text("(detail ->> 'request')"),
        postgresql_where=text("detail ? 'request'"),
    ),
)
