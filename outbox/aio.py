"""The unit of work of an ``async`` service: `AsyncUnitOfWork` publishes, schedules and cancels
in an `AsyncSession`'s transaction with the same validation, trace, modes and errors as
`outbox.UnitOfWork`, which it runs in SQLAlchemy's greenlet (``AsyncSession.run_sync``): the
statements are the same, awaited on the async driver. With psycopg's async driver and an
engine given to `outbox.attach_at_commit`, delete mode's row rides in the commit's round trip
as it does for a synchronous session; asyncpg writes it at publish."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from outbox import scheduled
from outbox.contracts import Event
from outbox.publish import NewEvent, Outbox
from outbox.unit import UnitOfWork
from outboxkit.kernel.envelope import Envelope
from outboxkit.kernel.tracing.context import TraceContext


class AsyncUnitOfWork:
    """Publish events into ``session``'s transaction; the owner of the unit commits it (``await
    session.commit()``). The same arguments as `outbox.UnitOfWork`, on an `AsyncSession`.

    Args:
        session: The transaction's session; the unit never commits it.
        outbox: How events are written; `Outbox` defaults when None.
        trace: The span of the unit, the parent of its publish spans; None: no spans.
        published: The list the published envelopes are appended to; a new one when None.
        event_spans: The spans applying consumed events, by event id.
    """

    def __init__(
        self,
        session: AsyncSession,
        outbox: Outbox | None = None,
        trace: TraceContext | None = None,
        published: list[Envelope] | None = None,
        event_spans: Mapping[str, TraceContext] | None = None,
    ) -> None:
        if not isinstance(session, AsyncSession):
            raise TypeError(
                f"AsyncUnitOfWork needs an AsyncSession, got {type(session).__name__} (a "
                "synchronous Session publishes through outbox.UnitOfWork)"
            )
        self.session = session
        self.unit = UnitOfWork(session.sync_session, outbox, trace, published, event_spans)

    @property
    def outbox(self) -> Outbox:
        """How this unit writes events."""
        return self.unit.outbox

    @property
    def published(self) -> list[Envelope]:
        """The envelopes published so far (not those scheduled)."""
        return self.unit.published

    async def publish(
        self,
        *,
        aggregate_type: str,
        aggregate_id: str,
        event_type: str,
        payload: Any,
        headers: Mapping[str, str] | None = None,
        caused_by: Envelope | None = None,
    ) -> Envelope:
        """`UnitOfWork.publish`, awaited.

        Args:
            aggregate_type: What the event is about (``order``); it names the Kafka topic.
            aggregate_id: Which one: the Kafka key.
            event_type: What happened (``OrderPlaced``).
            payload: The event's body, any JSON-serializable value.
            headers: Extra Kafka headers, or None.
            caused_by: The consumed event this one follows from, whose trace it continues.
        """
        event = NewEvent(aggregate_type, aggregate_id, event_type, payload, headers, caused_by)
        return (await self.publish_many([event]))[0]

    async def publish_event(
        self,
        event: Event,
        *,
        aggregate_id: str | None = None,
        headers: Mapping[str, str] | None = None,
        caused_by: Envelope | None = None,
    ) -> Envelope:
        """`UnitOfWork.publish_event`, awaited.

        Args:
            event: The typed event.
            aggregate_id: The aggregate id; None takes the model's key field's value.
            headers: Extra Kafka headers, or None.
            caused_by: The consumed event this one follows from, whose trace it continues.
        """
        new = event.new_event(aggregate_id=aggregate_id, headers=headers, caused_by=caused_by)
        return (await self.publish_many([new]))[0]

    async def publish_many(self, events: Sequence[NewEvent]) -> list[Envelope]:
        """`UnitOfWork.publish_many`, awaited: every event validated, then written in one
        statement (nothing when one is invalid).

        Args:
            events: The events, written in this order.
        """
        return await self.session.run_sync(lambda _: self.unit.publish_many(events))

    async def schedule(
        self,
        *,
        aggregate_type: str,
        aggregate_id: str,
        event_type: str,
        payload: Any,
        at: datetime | None = None,
        delay: float | timedelta | None = None,
        key: str | None = None,
        headers: Mapping[str, str] | None = None,
        caused_by: Envelope | None = None,
    ) -> Envelope:
        """`UnitOfWork.schedule`, awaited.

        Args:
            aggregate_type: What the event is about (``order``); it names the Kafka topic.
            aggregate_id: Which one: the Kafka key.
            event_type: What happened, or what to do (``PaymentTimedOut``).
            payload: The event's body, any JSON-serializable value.
            at: When it is due (timezone-aware); give this or ``delay``.
            delay: Seconds (or a timedelta) after this transaction's start.
            key: Your name for it, to cancel or replace it.
            headers: Extra Kafka headers, or None.
            caused_by: The consumed event it follows from, whose trace it continues.
        """
        event = NewEvent(aggregate_type, aggregate_id, event_type, payload, headers, caused_by)
        return (await self.schedule_many([event], [scheduled.due_of(at, delay, key)]))[0]

    async def schedule_event(
        self,
        event: Event,
        *,
        at: datetime | None = None,
        delay: float | timedelta | None = None,
        key: str | None = None,
        aggregate_id: str | None = None,
        headers: Mapping[str, str] | None = None,
        caused_by: Envelope | None = None,
    ) -> Envelope:
        """`UnitOfWork.schedule_event`, awaited.

        Args:
            event: The typed event.
            at: When it is due (timezone-aware); give this or ``delay``.
            delay: Seconds (or a timedelta) after this transaction's start.
            key: Your name for it, to cancel or replace it.
            aggregate_id: The aggregate id; None takes the model's key field's value.
            headers: Extra Kafka headers, or None.
            caused_by: The consumed event it follows from, whose trace it continues.
        """
        new = event.new_event(aggregate_id=aggregate_id, headers=headers, caused_by=caused_by)
        return (await self.schedule_many([new], [scheduled.due_of(at, delay, key)]))[0]

    async def schedule_many(
        self, events: Sequence[NewEvent], dues: Sequence[scheduled.Due]
    ) -> list[Envelope]:
        """`UnitOfWork.schedule_many`, awaited.

        Args:
            events: The events, in the order they are scheduled.
            dues: When each is due, and its key (`outbox.scheduled.due_of`).
        """
        return await self.session.run_sync(lambda _: self.unit.schedule_many(events, dues))

    async def cancel_scheduled(self, *keys: str) -> int:
        """`UnitOfWork.cancel_scheduled`, awaited: how many pending messages were cancelled.

        Args:
            keys: The keys the messages were scheduled under.
        """
        return await self.session.run_sync(lambda _: self.unit.cancel_scheduled(*keys))
