"""Writing an event as an outbox row in the caller's transaction (never committing it).

Applications publish through `outbox.UnitOfWork`, which adds the trace context and remembers
what was published; `Outbox.publish` is the write underneath."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Text, cast, delete, insert, literal
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Session

from outbox.envelope import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    DEFAULT_MAX_RECORD_BYTES,
    Envelope,
    extra_headers,
    make_envelope,
)
from outbox.errors import InvalidEvent
from outbox.table import outbox_table


@dataclass(frozen=True)
class NewEvent:
    """An event to publish, before validation gives it an id and a time."""

    aggregate_type: str
    aggregate_id: str
    event_type: str
    payload: Any
    headers: Mapping[str, str] | None = None
    # The consumed event this one follows from: its trace is continued (see UnitOfWork).
    caused_by: Envelope | None = None


@dataclass(frozen=True)
class Outbox:
    """How events are written: ``delete`` mode (default) or ``retain`` mode, and the size limits
    (of the payload and of the whole Kafka record, both as the connector writes them).

    ``delete`` inserts the row and deletes it in the same transaction: the WAL still carries the
    insert, Debezium emits the event, and the table never grows, so no cleanup job is needed.
    ``retain`` keeps rows for audit or replay; run ``outboxkit outbox cleanup`` to bound them.
    """

    mode: str = "delete"
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES

    def __post_init__(self) -> None:
        if self.mode not in ("delete", "retain"):
            raise ValueError(f"outbox mode must be 'delete' or 'retain', not {self.mode!r}")

    def publish(
        self,
        session: Session,
        *,
        aggregate_type: str,
        aggregate_id: str,
        event_type: str,
        payload: Any,
        headers: Mapping[str, str] | None = None,
    ) -> Envelope:
        """Validate the event and add it to ``session``'s transaction; the caller commits."""
        event = NewEvent(aggregate_type, aggregate_id, event_type, payload, headers)
        return self.publish_many(session, [event])[0]

    def publish_many(self, session: Session, events: Sequence[NewEvent]) -> list[Envelope]:
        """Validate every event, then write them in one INSERT (and, in delete mode, one DELETE)
        in ``session``'s transaction; nothing is written when one is invalid."""
        if not isinstance(session, Session):
            raise InvalidEvent(f"publish needs a SQLAlchemy Session, got {type(session).__name__}")
        rows, envelopes = [], []
        for event in events:
            envelope, payload_json = make_envelope(
                aggregate_type=event.aggregate_type,
                aggregate_id=event.aggregate_id,
                event_type=event.event_type,
                payload=event.payload,
                headers=event.headers,
                max_payload_bytes=self.max_payload_bytes,
                max_record_bytes=self.max_record_bytes,
            )
            envelopes.append(envelope)
            rows.append(_row(envelope, payload_json))
        for start in range(0, len(rows), ROWS_PER_STATEMENT):
            chunk = rows[start : start + ROWS_PER_STATEMENT]
            session.execute(_INSERT.values(chunk))
            if self.mode == "delete":
                ids = [row["id"] for row in chunk]
                session.execute(delete(outbox_table).where(outbox_table.c.id.in_(ids)))
        return envelopes


def _row(envelope: Envelope, payload_json: str) -> dict[str, Any]:
    extra = extra_headers(envelope)
    return {
        "id": envelope.event_id,
        "aggregatetype": envelope.aggregate_type,
        "aggregateid": envelope.aggregate_id,
        "type": envelope.event_type,
        "payload": cast(literal(payload_json, Text), JSONB),  # encoded once, by validation
        "traceparent": envelope.traceparent,
        "headers": extra or None,
        "schema_version": envelope.schema_version,
        "created_at": envelope.created_at,
    }


_INSERT = insert(outbox_table)
# Postgres takes at most 65,535 bind parameters per statement (9 per outbox row).
ROWS_PER_STATEMENT = 1000
