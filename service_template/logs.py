"""Structured (JSON line) logs carrying the request's trace id."""

from __future__ import annotations

import contextvars
import json
import logging
import sys
from datetime import UTC, datetime

from outboxkit.kernel.tracing.context import TraceContext

# The span of the request being served (set by the app's middleware).
current_trace: contextvars.ContextVar[TraceContext | None] = contextvars.ContextVar(
    "current_trace", default=None
)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, service, trace id, extras."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            "service": self.service,
            "trace_id": trace.trace_id if (trace := current_trace.get()) else None,
        }
        for key in ("method", "path", "status", "ms"):
            if hasattr(record, key):
                entry[key] = getattr(record, key)
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure(service: str, level: str = "INFO", as_json: bool = True) -> None:
    """Send the root logger to stderr, as JSON lines unless ``as_json`` is False."""
    handler = logging.StreamHandler(sys.stderr)
    if as_json:
        handler.setFormatter(JsonFormatter(service))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
