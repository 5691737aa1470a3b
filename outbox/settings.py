"""The outbox's settings, composed into a service's settings (e.g. ``ORDERS_OUTBOX__MODE``)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from outbox.publish import Outbox, OutboxMode
from outboxkit.kernel.envelope import DEFAULT_MAX_PAYLOAD_BYTES, DEFAULT_MAX_RECORD_BYTES
from outboxkit.kernel.wire import DEFAULT_MESSAGE_PREFIX


class OutboxSettings(BaseModel):
    """How a service writes its events."""

    mode: OutboxMode = Field(
        default="delete",
        description="delete: insert and delete in one transaction (no cleanup); "
        "retain: keep rows (run `outboxkit outbox cleanup`); "
        "message: a transactional logical decoding message per event, no table",
    )
    message_prefix: str = Field(
        default=DEFAULT_MESSAGE_PREFIX,
        min_length=1,
        description="prefix of the logical decoding messages (message mode); the connector "
        "captures this prefix",
    )
    max_payload_bytes: int = Field(
        default=DEFAULT_MAX_PAYLOAD_BYTES,
        gt=0,
        description="largest payload accepted, in bytes of its jsonb text (the Kafka value)",
    )
    max_record_bytes: int = Field(
        default=DEFAULT_MAX_RECORD_BYTES,
        gt=0,
        description="largest Kafka record accepted (key, value, headers), as the connector "
        "writes it; keep it below the producer's max.request.size",
    )

    def build(self) -> Outbox:
        """The `Outbox` these settings describe."""
        return Outbox(
            mode=self.mode,
            max_payload_bytes=self.max_payload_bytes,
            max_record_bytes=self.max_record_bytes,
            message_prefix=self.message_prefix,
        )
