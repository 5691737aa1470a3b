"""Structured (JSON line) logs carrying the request's trace id."""

from __future__ import annotations

import contextvars
import json
import logging
import os
import re
import sys
from datetime import UTC, datetime

trace_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("trace_id", default=None)
_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


def parse_traceparent(value: str | None) -> str | None:
    """The trace id of a W3C ``traceparent``, or None when absent or malformed."""
    match = _TRACEPARENT.match(value or "")
    if not match or match.group(1) == "0" * 32:
        return None
    return match.group(1)


def new_trace_id() -> str:
    return os.urandom(16).hex()


def traceparent(trace: str) -> str:
    """A traceparent for a new span of ``trace`` (sampled)."""
    return f"00-{trace}-{os.urandom(8).hex()}-01"


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
            "trace_id": trace_id.get(),
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
