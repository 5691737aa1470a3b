"""Transactional outbox: write an event in the same transaction as the business rows."""

import outboxkit.kernel  # noqa: F401  (first: it refuses packages shadowing the framework's)
from outbox.aio import AsyncUnitOfWork
from outbox.at_commit import attach as attach_at_commit
from outbox.contracts import ContractError, Contracts, Event, Received
from outbox.publish import NewEvent, Outbox
from outbox.settings import OutboxSettings
from outbox.table import metadata, outbox_heartbeat_table, outbox_table
from outbox.unit import PublishedObserver, UnitOfWork
from outbox.unnest import unnested, unnested_rows
from outboxkit.kernel.engines import async_engine_for, engine_for
from outboxkit.kernel.envelope import Envelope, make_envelope
from outboxkit.kernel.errors import InvalidEvent, OutboxError
from outboxkit.kernel.tracing.context import TraceContext

__all__ = [
    "AsyncUnitOfWork",
    "ContractError",
    "Contracts",
    "Envelope",
    "Event",
    "InvalidEvent",
    "NewEvent",
    "Outbox",
    "OutboxError",
    "OutboxSettings",
    "PublishedObserver",
    "Received",
    "TraceContext",
    "UnitOfWork",
    "async_engine_for",
    "attach_at_commit",
    "engine_for",
    "make_envelope",
    "metadata",
    "outbox_heartbeat_table",
    "outbox_table",
    "unnested",
    "unnested_rows",
]
