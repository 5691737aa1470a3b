"""W3C Trace Context: the ``traceparent`` an event carries from one unit of work to the next."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

_FORMAT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")  # fullmatch


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
        match = _FORMAT.fullmatch(value or "")
        if not match or match.group(1) == "0" * 32 or match.group(2) == "0" * 16:
            return None
        return cls(match.group(1), match.group(2), match.group(3))

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
        return f"00-{self.trace_id}-{self.span_id}-{self.flags}"
