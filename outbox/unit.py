"""The unit of work: one transaction's session, the service's outbox, the trace context, and the
events published so far. HTTP routes and inbox handlers get one alike, so an event is published
the same way (same validation, headers and trace) wherever it comes from."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy.orm import Session

from outbox.envelope import Envelope
from outbox.publish import NewEvent, Outbox
from outbox.trace import TraceContext
from outbox.wire import TRACEPARENT

# Told, after the unit's transaction committed, which events it published (e.g. metrics).
PublishedObserver = Callable[[Sequence[Envelope]], None]


class UnitOfWork:
    """Publish events into ``session``'s transaction; the owner of the unit commits it.

    ``trace`` is the span of the unit (an HTTP request, the application of one event): every
    event published gets a ``traceparent`` of a new child span of it, unless the caller passed
    one."""

    def __init__(
        self,
        session: Session,
        outbox: Outbox | None = None,
        trace: TraceContext | None = None,
        published: list[Envelope] | None = None,
    ) -> None:
        self.session = session
        self.outbox = outbox or Outbox()
        self.trace = trace
        self.published: list[Envelope] = [] if published is None else published

    def for_event(self, event: Envelope) -> UnitOfWork:
        """The unit of applying ``event`` inside this one: same transaction and ``published``
        list, its span a child of the ``traceparent`` the event carried (a new trace when none)."""
        return UnitOfWork(
            self.session, self.outbox, TraceContext.continuing(event.traceparent), self.published
        )

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
        trace it continues."""
        return self.publish_many(
            [NewEvent(aggregate_type, aggregate_id, event_type, payload, headers, caused_by)]
        )[0]

    def publish_many(self, events: Sequence[NewEvent]) -> list[Envelope]:
        """Validate every event, then add them all to this unit's transaction in one statement
        (nothing is written when one is invalid)."""
        with_trace = [
            replace(e, headers=self._traced(e)) if e.caused_by or self.trace else e for e in events
        ]
        envelopes = self.outbox.publish_many(self.session, with_trace)
        self.published.extend(envelopes)
        return envelopes

    def _traced(self, event: NewEvent) -> dict[str, str]:
        merged = dict(event.headers or {})
        if TRACEPARENT not in merged:
            span = (
                TraceContext.continuing(event.caused_by.traceparent)
                if event.caused_by is not None
                else self.trace
            )
            assert span is not None  # only called with a cause or a trace
            merged[TRACEPARENT] = span.child().header()
        return merged
