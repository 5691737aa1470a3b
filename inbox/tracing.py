"""The spans of the records one inbox transaction decides: one per record, a child of the
``traceparent`` it carried (the publish span that produced it), linked to the span current when
the slice is applied (the driver's micro-batch span, on a Spark executor), with its topic,
partition, offset, the inbox's decision and the handler's time."""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.trace import INVALID_SPAN, SpanKind

from inbox.decision import Action
from outboxkit.kernel.tracing import spans
from outboxkit.kernel.tracing.context import TraceContext
from outboxkit.kernel.wire.record import Decoded


class RecordSpans:
    """The spans of ``consumer``'s records in one transaction, started in offset order."""

    def __init__(self, consumer: str, items: Sequence[Decoded] = ()) -> None:
        self.consumer = consumer
        self.on = spans.enabled()
        self.batch = spans.current() if self.on else None
        self.started: list[spans.Traced] = []
        self.event_ids: list[str | None] = []
        if not self.on:  # nothing records: a placeholder per record, at once
            self.started = [_OFF] * len(items)
            self.event_ids = [None] * len(items)
            return
        for item in items:
            self.start(item)

    def end_all(self, error: str) -> None:
        """End every started span as failed (the slice is rolled back and redone)."""
        for traced in self.started:
            traced.end(error=error[:500])

    def start(self, item: Decoded) -> spans.Traced:
        """Start the span of ``item``, a child of the traceparent it carried."""
        record, envelope = item.record, item.envelope
        if not self.on:  # nothing records: no span, no context handed on (see by_event_id)
            self.started.append(_OFF)
            self.event_ids.append(None)
            return _OFF
        parent = TraceContext.parse(envelope.traceparent) if envelope is not None else None
        traced = spans.start(
            f"{self.consumer} apply {item.event_type or 'record'}",
            parent=parent,
            kind=SpanKind.CONSUMER,
            attributes={
                "messaging.system": "kafka",
                "messaging.destination.name": record.topic,
                "messaging.destination.partition.id": str(record.partition),
                "messaging.kafka.offset": record.offset,
                "outboxkit.consumer": self.consumer,
                "outboxkit.event.id": item.event_id or "",
                "outboxkit.event.type": item.event_type or "",
                "outboxkit.aggregate.id": item.key or "",
            },
            links=[self.batch] if self.batch is not None else (),
        )
        self.started.append(traced)
        self.event_ids.append(str(envelope.event_id) if envelope is not None else None)
        return traced

    @staticmethod
    def context(traced: spans.Traced) -> TraceContext | None:
        """The context ``traced`` hands on to the events published under it (None: tracing is
        off, they continue the consumed event's traceparent)."""
        return None if traced is _OFF else traced.context

    def by_event_id(self) -> dict[str, TraceContext]:
        """The started spans' contexts by the event id of their record (the units of work of
        the handlers get it: the events they publish continue these spans)."""
        return {
            event_id: t.context
            for event_id, t in zip(self.event_ids, self.started, strict=True)
            if event_id and t is not _OFF
        }


# The stand-in of a record's span while tracing is off: never recorded, and its context is never
# handed on (by_event_id leaves it out; the apply loop passes no span), so events published by
# the handlers continue the consumed event's traceparent as without tracing.
_OFF = spans.Traced(INVALID_SPAN, TraceContext("0" * 32, "0" * 16, "00"))


def ended(
    traced: spans.Traced,
    action: Action,
    reason: str = "",
    *,
    handler_seconds: float | None = None,
    attempts: int = 1,
) -> None:
    """End a record's span with the inbox's decision (and the handler's time when it ran)."""
    if traced is _OFF:
        return
    attributes: dict[str, str | int | float] = {
        "outboxkit.inbox.decision": action.value,
        "outboxkit.handler.attempts": attempts,
    }
    if reason:
        attributes["outboxkit.inbox.reason"] = reason[:500]
    if handler_seconds is not None:
        attributes["outboxkit.handler.ms"] = round(handler_seconds * 1000, 3)
    failed = action is not Action.APPLY and action is not Action.SKIP_DUPLICATE and reason
    traced.end(attributes, error=reason[:500] if failed else None)
