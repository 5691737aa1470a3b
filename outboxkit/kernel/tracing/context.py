"""W3C Trace Context: the ``traceparent`` an event carries from one unit of work to the next."""

from __future__ import annotations

import os
from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_W3C = TraceContextTextMapPropagator()
_TRACEPARENT = "traceparent"
_LENGTH = len("00-") + 32 + len("-") + 16 + len("-") + 2


@dataclass(frozen=True)
class TraceContext:
    """One span's place in a trace: the trace id, the span id, the trace flags (01: sampled).

    Attributes:
        trace_id: The trace's id, 32 lower-case hex digits.
        span_id: The span's id, 16 lower-case hex digits.
        flags: The trace flags, 2 hex digits (``01``: sampled).
    """

    trace_id: str
    span_id: str
    flags: str = "01"

    @classmethod
    def parse(cls, value: str | None) -> TraceContext | None:
        """The context of a ``traceparent`` header, or None when absent or malformed.

        Args:
            value: A ``traceparent`` header value (``00-<trace id>-<span id>-<flags>``), or None.
        """
        if not value:
            return None
        span = trace.get_current_span(_W3C.extract({_TRACEPARENT: value})).get_span_context()
        if not span.is_valid:
            return None
        # The propagator forgives what a reader may (blanks around the value, a final newline,
        # a later version and its extra fields); a header that travels on is exactly version 00.
        if len(value) != _LENGTH or not value.startswith("00-"):
            return None
        return cls.of(span)

    @classmethod
    def of(cls, span: trace.SpanContext) -> TraceContext:
        """An OpenTelemetry span context as a W3C trace context.

        Args:
            span: The span's OpenTelemetry context (its ids and trace flags).
        """
        return cls(f"{span.trace_id:032x}", f"{span.span_id:016x}", f"{span.trace_flags:02x}")

    @classmethod
    def new(cls) -> TraceContext:
        """The root span of a new trace."""
        return cls(os.urandom(16).hex(), os.urandom(8).hex())

    @classmethod
    def continuing(cls, value: str | None) -> TraceContext:
        """A span that is the child of ``value`` when it is a valid traceparent, else a new root.

        Args:
            value: The parent's ``traceparent`` header value, or None.
        """
        parent = cls.parse(value)
        return parent.child() if parent else cls.new()

    def child(self) -> TraceContext:
        """A new span of the same trace."""
        return TraceContext(self.trace_id, os.urandom(8).hex(), self.flags)

    def header(self) -> str:
        """This context as a ``traceparent`` header value."""
        carrier: dict[str, str] = {}
        _W3C.inject(carrier, trace.set_span_in_context(trace.NonRecordingSpan(self.span_context())))
        return carrier[_TRACEPARENT]

    def span_context(self) -> trace.SpanContext:
        """This context as an OpenTelemetry span context (of a span in another process)."""
        flags = trace.TraceFlags(int(self.flags, 16))
        return trace.SpanContext(int(self.trace_id, 16), int(self.span_id, 16), True, flags)
