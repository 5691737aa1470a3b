"""The outbox's settings, composed into a service's settings (e.g. ``ORDERS_OUTBOX__MODE``)."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, Field
from sqlalchemy.engine import Engine

from outbox import scheduled
from outbox.publish import Outbox, OutboxMode
from outboxkit.kernel.envelope import DEFAULT_MAX_PAYLOAD_BYTES, DEFAULT_MAX_RECORD_BYTES
from outboxkit.kernel.wire import DEFAULT_MESSAGE_PREFIX


class ReleaseSettings(BaseModel):
    """How a process releases the scheduled messages that come due (`outbox.scheduled`)."""

    enabled: bool = Field(
        default=True,
        description="run a releaser in this process (every service replica and consumer "
        "driver may: one releases at a time)",
    )
    poll_seconds: float = Field(
        default=scheduled.DEFAULT_POLL_SECONDS,
        gt=0,
        description="the longest sleep between passes: a message waits at most this long "
        "beyond its time (plus one pass)",
    )
    batch: int = Field(
        default=scheduled.DEFAULT_LIMIT, ge=1, description="messages per release transaction"
    )
    max_rate: float = Field(
        default=scheduled.DEFAULT_MAX_RATE,
        gt=0,
        description="messages per second at most: the pace of a backlog after an outage",
    )

    def releaser(
        self,
        engine: Engine,
        outbox: Outbox,
        on_release: Callable[[scheduled.Released], None] | None = None,
    ) -> scheduled.Releaser | None:
        """A releaser (not started) writing into ``outbox``; None when not enabled."""
        if not self.enabled:
            return None
        return scheduled.Releaser(
            engine,
            outbox.release_writer(),
            limit=self.batch,
            max_rate=self.max_rate,
            poll=self.poll_seconds,
            on_release=on_release,
        )


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

    release: ReleaseSettings = Field(
        default_factory=ReleaseSettings,
        description="the releaser of scheduled messages (e.g. ORDERS_OUTBOX__RELEASE__ENABLED)",
    )

    def build(self) -> Outbox:
        """The `Outbox` these settings describe."""
        return Outbox(
            mode=self.mode,
            max_payload_bytes=self.max_payload_bytes,
            max_record_bytes=self.max_record_bytes,
            message_prefix=self.message_prefix,
        )
