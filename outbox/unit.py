"""The unit of work: one transaction's session, the service's outbox, the trace context, and the
events published so far. HTTP routes and inbox handlers get one alike, so an event is published
the same way (same validation, headers and trace) wherever it comes from."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy.orm import Session

from outbox.envelope import TRACEPARENT, Envelope
from outbox.publish import Outbox
from outbox.trace import TraceContext

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
    ) -> None:
        self.session = session
        self.outbox = outbox or Outbox()
        self.trace = trace
        self.published: list[Envelope] = []

    def publish(
        self,
        *,
        aggregate_type: str,
        aggregate_id: str,
        event_type: str,
        payload: Any,
        headers: Mapping[str, str] | None = None,
    ) -> Envelope:
        """Validate the event and add it to this unit's transaction (InvalidEvent when it
        cannot travel)."""
        merged = dict(headers or {})
        if self.trace is not None and TRACEPARENT not in merged:
            merged[TRACEPARENT] = self.trace.child().header()
        envelope = self.outbox.publish(
            self.session,
            aggregate_type=aggregate_type,
            aggregate_id=aggregate_id,
            event_type=event_type,
            payload=payload,
            headers=merged,
        )
        self.published.append(envelope)
        return envelope
