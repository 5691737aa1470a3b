"""Transactional outbox: write an event in the same transaction as the business rows."""

from outbox.envelope import Envelope, make_envelope
from outbox.errors import InvalidEvent, OutboxError
from outbox.publish import Outbox, publish
from outbox.table import metadata, outbox_heartbeat_table, outbox_table

__all__ = [
    "Envelope",
    "InvalidEvent",
    "Outbox",
    "OutboxError",
    "make_envelope",
    "metadata",
    "outbox_heartbeat_table",
    "outbox_table",
    "publish",
]
