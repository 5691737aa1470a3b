"""The unit of work: one transaction's session, the service's outbox, the trace context, and the
events published so far. HTTP routes and inbox handlers get one alike, so an event is published
the same way (same validation, headers and trace) wherever it comes from."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from opentelemetry.trace import SpanKind
from sqlalchemy.orm import Session

from outbox import scheduled
from outbox.contracts import Event
from outbox.publish import NewEvent, Outbox
from outboxkit.kernel.envelope import Envelope
from outboxkit.kernel.tracing import spans
from outboxkit.kernel.tracing.context import TraceContext
from outboxkit.kernel.wire import TRACEPARENT

# Told, after the unit's transaction committed, which events it published (e.g. metrics).
PublishedObserver = Callable[[Sequence[Envelope]], None]


class UnitOfWork:
    """Publish events into ``session``'s transaction; the owner of the unit commits it.

    ``trace`` is the span of the unit (an HTTP request, the application of one event): every
    event published gets a publish span, a child of it, whose context its ``traceparent``
    carries, unless the caller passed one. ``event_spans``: the spans applying the consumed
    events, by event id (set by the inbox); an event published ``caused_by`` one continues it.

    Args:
        session: The transaction's session; the unit never commits it.
        outbox: How events are written; `Outbox` defaults when None.
        trace: The span of the unit, the parent of its publish spans; None: no spans.
        published: The list the published envelopes are appended to (shared with the units
            made by `for_event`); a new one when None.
        event_spans: The spans applying the consumed events, by event id (set by the inbox).
    """

    def __init__(
        self,
        session: Session,
        outbox: Outbox | None = None,
        trace: TraceContext | None = None,
        published: list[Envelope] | None = None,
        event_spans: Mapping[str, TraceContext] | None = None,
    ) -> None:
        self.session = session
        self.outbox = outbox or Outbox()
        self.trace = trace
        self.published: list[Envelope] = [] if published is None else published
        self.event_spans: Mapping[str, TraceContext] = event_spans or {}

    def for_event(self, event: Envelope) -> UnitOfWork:
        """The unit of applying ``event`` inside this one: same transaction and ``published``
        list, its span the inbox's span of the event (else a child of the ``traceparent`` it
        carried; a new trace when none).

        Args:
            event: The consumed event being applied.
        """
        trace = self._applying(event)
        return UnitOfWork(self.session, self.outbox, trace, self.published, self.event_spans)

    def publish(
        self,
        *,
        aggregate_type: str,
        aggregate_id: str,
        event_type: str,
        payload: Any,
        headers: Mapping[str, str] | None = None,
        caused_by: Envelope | None = None,
    ) -> Envelope:
        """Validate the event and add it to this unit's transaction (InvalidEvent when it
        cannot travel). ``caused_by``: the consumed event it follows from (batch handlers), whose
        trace it continues.

        Args:
            aggregate_type: What the event is about (``order``); it names the Kafka topic.
            aggregate_id: Which one: the Kafka key.
            event_type: What happened (``OrderPlaced``).
            payload: The event's body, any JSON-serializable value.
            headers: Extra Kafka headers, or None.
            caused_by: The consumed event this one follows from, whose trace it continues.
        """
        return self.publish_many(
            [NewEvent(aggregate_type, aggregate_id, event_type, payload, headers, caused_by)]
        )[0]

    def publish_event(
        self,
        event: Event,
        *,
        aggregate_id: str | None = None,
        headers: Mapping[str, str] | None = None,
        caused_by: Envelope | None = None,
    ) -> Envelope:
        """Publish a typed event (`outbox.contracts.Event`): validated, its type, aggregate and
        version from its model, its aggregate id from its key field unless given.

        Args:
            event: The typed event.
            aggregate_id: The aggregate id; None takes the model's key field's value.
            headers: Extra Kafka headers, or None.
            caused_by: The consumed event this one follows from, whose trace it continues.
        """
        new = event.new_event(aggregate_id=aggregate_id, headers=headers, caused_by=caused_by)
        return self.publish_many([new])[0]

    def publish_many(self, events: Sequence[NewEvent]) -> list[Envelope]:
        """Validate every event, then add them all to this unit's transaction in one statement
        (nothing is written when one is invalid).

        Args:
            events: The events, written in this order.
        """
        return self._traced(events, lambda traced: self.outbox.publish_many(self.session, traced))

    def schedule(
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
        """Validate the event and schedule it in this unit's transaction: it reaches the
        outbox, then Kafka, no earlier than ``at`` or ``delay`` seconds after this transaction
        started, on the database's clock (`outbox.scheduled`), exactly once. Rolled back with
        the transaction like any write.

        Args:
            aggregate_type: What the event is about (``order``); it names the Kafka topic.
            aggregate_id: Which one: the Kafka key.
            event_type: What happened, or what to do (``PaymentTimedOut``).
            payload: The event's body, any JSON-serializable value.
            at: When it is due (timezone-aware); give this or ``delay``.
            delay: Seconds (or a timedelta) after this transaction's start.
            key: Your name for it (``payment-timeout:o-1``) to cancel it with
                `cancel_scheduled`; scheduling again under a pending key replaces that message.
            headers: Extra Kafka headers, or None.
            caused_by: The consumed event it follows from, whose trace it continues.
        """
        event = NewEvent(aggregate_type, aggregate_id, event_type, payload, headers, caused_by)
        return self.schedule_many([event], [scheduled.due_of(at, delay, key)])[0]

    def schedule_event(
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
        """`schedule` a typed event (`outbox.contracts.Event`), validated by its model.

        Args:
            event: The typed event.
            at: When it is due (timezone-aware); give this or ``delay``.
            delay: Seconds (or a timedelta) after this transaction's start.
            key: Your name for it, to cancel or replace it (see `schedule`).
            aggregate_id: The aggregate id; None takes the model's key field's value.
            headers: Extra Kafka headers, or None.
            caused_by: The consumed event it follows from, whose trace it continues.
        """
        new = event.new_event(aggregate_id=aggregate_id, headers=headers, caused_by=caused_by)
        return self.schedule_many([new], [scheduled.due_of(at, delay, key)])[0]

    def schedule_many(
        self, events: Sequence[NewEvent], dues: Sequence[scheduled.Due]
    ) -> list[Envelope]:
        """Validate every event, then schedule them all in one statement, each due as its
        ``dues`` says (`outbox.scheduled.due_of`); nothing is written when one is invalid.

        Args:
            events: The events, in the order they are scheduled.
            dues: When each is due, and its key.
        """
        return self._traced(
            events,
            lambda traced: self.outbox.schedule_many(self.session, traced, dues),
            published=False,  # not yet: the releaser publishes them when due
        )

    def cancel_scheduled(self, *keys: str) -> int:
        """Cancel the pending messages scheduled under ``keys``, in this unit's transaction (so
        the cancel commits with what made it needed); how many were pending. A message already
        released is past cancelling: it is not counted, and its consumer gets it.

        Args:
            keys: The keys the messages were scheduled under.
        """
        return scheduled.cancel(self.session, keys)

    def _traced(
        self,
        events: Sequence[NewEvent],
        write: Callable[[Sequence[NewEvent]], list[Envelope]],
        *,
        published: bool = True,
    ) -> list[Envelope]:
        """``write`` the events, each with a publish span (a child of its cause's or of the
        unit's) whose context its ``traceparent`` carries; with ``published``, add them to
        `published`."""
        started = [self._publish_span(e) for e in events]
        with_trace = [
            e
            if s is None
            else replace(e, headers={**(e.headers or {}), TRACEPARENT: s.context.header()})
            for e, s in zip(events, started, strict=True)
        ]
        try:
            envelopes = write(with_trace)
        except Exception as exc:
            for s in started:
                if s is not None:
                    s.end(error=f"{type(exc).__name__}: {exc}")
            raise
        for s, envelope in zip(started, envelopes, strict=True):
            if s is not None:
                s.end({"outboxkit.event.id": str(envelope.event_id)})
        if published:
            self.published.extend(envelopes)
        return envelopes

    def _applying(self, event: Envelope) -> TraceContext:
        """The span applying ``event``: the inbox's, else a child of the event's traceparent."""
        known = self.event_spans.get(str(event.event_id))
        return known if known is not None else TraceContext.continuing(event.traceparent)

    def _publish_span(self, event: NewEvent) -> spans.Traced | None:
        """The publish span of ``event``, a child of its cause's span or of the unit's; None
        when it has neither or carries its own traceparent."""
        if TRACEPARENT in (event.headers or {}):
            return None
        parent = self._applying(event.caused_by) if event.caused_by is not None else self.trace
        if parent is None:
            return None
        return spans.start(
            f"publish {event.aggregate_type} {event.event_type}",
            parent=parent,
            kind=SpanKind.PRODUCER,
            attributes={
                "outboxkit.aggregate.type": event.aggregate_type,
                "outboxkit.aggregate.id": event.aggregate_id,
                "outboxkit.event.type": event.event_type,
            },
        )
