"""The spans of the units of work (an HTTP request, a publish, applying a consumed event) through
the OpenTelemetry API. When the process set up the SDK (`outboxkit.kernel.tracing`) they are
recorded and the ``traceparent`` an event carries is the span's own context; otherwise nothing is
recorded and the context handed on is a fresh child id of the parent
(`outboxkit.kernel.tracing.context`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import (
    INVALID_SPAN,
    Link,
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
)
from opentelemetry.util.types import AttributeValue

from outboxkit.kernel.tracing.context import TraceContext

TRACER = "outboxkit"
Attributes = Mapping[str, AttributeValue]


@dataclass(frozen=True)
class Traced:
    """A started span and the trace context it hands on (to events published under it)."""

    span: Span
    context: TraceContext

    @property
    def recording(self) -> bool:
        """True when the SDK records this span (tracing is on and it is sampled)."""
        return self.span.is_recording()

    def end(self, attributes: Attributes | None = None, error: str | None = None) -> None:
        """Set the last attributes (and an error status) and end the span."""
        if attributes:
            self.span.set_attributes(attributes)
        if error is not None:
            self.span.set_status(trace.Status(trace.StatusCode.ERROR, error))
        self.span.end()


def enabled() -> bool:
    """True when this process set up the SDK (`outboxkit.kernel.tracing.configure`): without it no
    span is recorded, and the per-record paths skip the API's no-op spans (some µs per record)."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def _tracer() -> trace.Tracer:
    return trace.get_tracer(TRACER)


def span_context(value: TraceContext) -> SpanContext:
    """``value`` as an OpenTelemetry span context (of a span in another process)."""
    return value.span_context()


def trace_context(value: SpanContext) -> TraceContext:
    """An OpenTelemetry span context as a W3C trace context."""
    return TraceContext.of(value)


def current() -> TraceContext | None:
    """The context of the process's current span (e.g. a micro-batch's), None when none."""
    value = trace.get_current_span().get_span_context()
    return trace_context(value) if value.is_valid else None


def recording() -> TraceContext | None:
    """The context of the current span when the SDK records it (e.g. the request span of
    FastAPI's own telemetry), else None."""
    span = trace.get_current_span()
    return trace_context(span.get_span_context()) if span.is_recording() else None


def start(
    name: str,
    *,
    parent: TraceContext | None,
    kind: SpanKind = SpanKind.INTERNAL,
    attributes: Attributes | None = None,
    links: Sequence[TraceContext] = (),
) -> Traced:
    """Start a span, a child of ``parent`` (a new trace when None); the caller ends it."""
    if not enabled():  # the API's no-op span would only cost time: hand on a new id alone
        return Traced(INVALID_SPAN, parent.child() if parent is not None else TraceContext.new())
    parent_context = (
        trace.set_span_in_context(NonRecordingSpan(span_context(parent)))
        if parent is not None
        else otel_context.Context()
    )
    span = _tracer().start_span(
        name,
        context=parent_context,
        kind=kind,
        attributes=attributes,
        links=[Link(span_context(link)) for link in links],
    )
    made = span.get_span_context()
    # Without the SDK the span is the parent's context again (or invalid): hand on a new id.
    if made.is_valid and (parent is None or f"{made.span_id:016x}" != parent.span_id):
        return Traced(span, trace_context(made))
    return Traced(span, parent.child() if parent is not None else TraceContext.new())


@contextmanager
def as_current(traced: Traced) -> Iterator[Traced]:
    """Make ``traced`` the current span for the block (spans started by other instrumentation
    nest under it); an exception leaving the block is recorded on it. Does not end it."""
    with trace.use_span(traced.span, end_on_exit=False, record_exception=True):
        yield traced


@contextmanager
def current_context(value: TraceContext | None) -> Iterator[None]:
    """Make ``value`` (a span of another process, e.g. the driver's micro-batch) the current
    span context for the block; nothing when None."""
    if value is None:
        yield
        return
    token = otel_context.attach(trace.set_span_in_context(NonRecordingSpan(span_context(value))))
    try:
        yield
    finally:
        otel_context.detach(token)
