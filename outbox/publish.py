"""Writing an event as an outbox row in the caller's transaction (never committing it).

Applications publish through `outbox.UnitOfWork`, which adds the trace context and remembers
what was published; `Outbox.publish` is the write underneath."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from sqlalchemy.orm import Session

from outbox import at_commit, scheduled
from outbox.statements import Row, emit_messages, write_rows
from outboxkit.kernel.envelope import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    DEFAULT_MAX_RECORD_BYTES,
    Envelope,
    make_envelope,
)
from outboxkit.kernel.errors import InvalidEvent
from outboxkit.kernel.wire import DEFAULT_MESSAGE_PREFIX

OutboxMode = Literal["delete", "retain", "message"]
MODES: tuple[str, ...] = get_args(OutboxMode)


@dataclass(frozen=True)
class NewEvent:
    """An event to publish, before validation gives it an id and a time.

    Attributes:
        aggregate_type: What the event is about (``order``); it names the Kafka topic.
        aggregate_id: Which one (``o-1``): the Kafka key, so one aggregate's events keep order.
        event_type: What happened (``OrderPlaced``).
        payload: The event's body, any JSON-serializable value.
        headers: Extra Kafka headers (text names and values), or None.
        caused_by: The consumed event this one follows from: its trace is continued (see
            `UnitOfWork`).
    """

    aggregate_type: str
    aggregate_id: str
    event_type: str
    payload: Any
    headers: Mapping[str, str] | None = None
    caused_by: Envelope | None = None


@dataclass(frozen=True)
class Outbox:
    """How events are written: ``delete`` mode (default), ``retain`` or ``message`` mode, and the
    size limits (of the payload and of the whole Kafka record, both as the connector writes them).

    ``delete`` inserts the row and deletes it in the same transaction: the WAL still carries the
    insert, Debezium emits the event, and the table never grows, so no cleanup job is needed.
    ``retain`` keeps rows for audit or replay; run ``outboxkit outbox cleanup`` to bound them.
    ``message`` writes no row: each event is a transactional logical decoding message
    (``pg_logical_emit_message``, prefix ``message_prefix``) that the connector turns into the
    same Kafka record; no table, index, delete or vacuum.

    Attributes:
        mode: ``delete``, ``retain`` or ``message``, as above.
        max_payload_bytes: The largest payload accepted, as the connector writes it (jsonb text).
        max_record_bytes: The largest whole Kafka record accepted (key, value, headers and
            framing): at most the producer's ``max.request.size`` and the topic's
            ``max.message.bytes``.
        message_prefix: Message mode: the prefix of the logical decoding messages, the one the
            connector captures.
        at_commit: Delete mode: the row is written in the round trip of the transaction's
            COMMIT (one round trip fewer per transaction); False writes it at publish.
    """

    mode: str = "delete"
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    message_prefix: str = DEFAULT_MESSAGE_PREFIX
    at_commit: bool = True

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"outbox mode must be one of {', '.join(MODES)}, not {self.mode!r}")

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
        """Validate the event and add it to ``session``'s transaction; the caller commits.

        Args:
            session: The caller's session; its transaction gets the event, uncommitted.
            aggregate_type: What the event is about (``order``); it names the Kafka topic.
            aggregate_id: Which one: the Kafka key.
            event_type: What happened (``OrderPlaced``).
            payload: The event's body, any JSON-serializable value.
            headers: Extra Kafka headers, or None.
        """
        event = NewEvent(aggregate_type, aggregate_id, event_type, payload, headers)
        return self.publish_many(session, [event])[0]

    def publish_many(self, session: Session, events: Sequence[NewEvent]) -> list[Envelope]:
        """Validate every event, then write them in one INSERT (and, in delete mode, one DELETE
        in the same round trip; in message mode, one statement of messages) in ``session``'s
        transaction; nothing is written when one is invalid.

        Args:
            session: The caller's session; its transaction gets the events, uncommitted.
            events: The events, written in this order.
        """
        envelopes, rows = self._rows(session, events)
        if self.mode == "delete" and self.at_commit and at_commit.defer(session, rows):
            return envelopes
        at_commit.flush(session)  # events waiting for the commit go first: the WAL keeps order
        if self.mode == "message":
            emit_messages(session, self.message_prefix, rows)
        else:
            write_rows(session, rows, delete=self.mode == "delete")
        return envelopes

    def schedule_many(
        self, session: Session, events: Sequence[NewEvent], dues: Sequence[scheduled.Due]
    ) -> list[Envelope]:
        """Validate every event as `publish_many` does, then write them to the scheduled
        messages in ``session``'s transaction, each due as its ``dues`` says (`outbox.scheduled`):
        a releaser moves each into the outbox once due. Nothing is written when one is invalid.

        Args:
            session: The caller's session; its transaction gets the messages, uncommitted.
            events: The events, in the order they are scheduled.
            dues: When each is due, and its key (`outbox.scheduled.due_of`).
        """
        if len(dues) != len(events):
            raise ValueError("schedule_many takes one due per event")
        envelopes, rows = self._rows(session, events)
        scheduled.schedule_rows(session, rows, dues)
        return envelopes

    def release_writer(self) -> scheduled.Write:
        """How a releaser writes due messages into this outbox (`outbox.scheduled.Releaser`)."""
        return scheduled.writer(self.mode, self.message_prefix)

    def _rows(
        self, session: Session, events: Sequence[NewEvent]
    ) -> tuple[list[Envelope], list[Row]]:
        """Every event validated: its envelope and its outbox row (InvalidEvent when one cannot
        travel)."""
        if not isinstance(session, Session):
            hint = (
                ": an AsyncSession publishes through outbox.AsyncUnitOfWork"
                if type(session).__name__ == "AsyncSession"
                else ""
            )
            raise InvalidEvent(
                f"publish needs a SQLAlchemy Session, got {type(session).__name__}{hint}"
            )
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
            rows.append(Row.of(envelope, payload_json))
        return envelopes, rows
