"""The event envelope: what a service publishes and what a consumer receives."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from outbox.errors import InvalidEvent

MAX_NAME_LENGTH = 255
DEFAULT_MAX_PAYLOAD_BYTES = (
    900_000  # below Kafka's 1 MB default record limit, with room for headers
)
SCHEMA_VERSION = 1
TRACEPARENT = "traceparent"

# The aggregate type becomes part of a Kafka topic name, so it must be a legal topic fragment.
_TOPIC_SAFE = re.compile(r"^[A-Za-z0-9._-]+$")
# W3C Trace Context: version-traceid-parentid-flags, lower-case hex.
# json.dumps escapes NUL as \u0000 (preceded by an even number of backslashes); jsonb rejects it.
_ESCAPED_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")


@dataclass(frozen=True)
class Envelope:
    """One event: identity, routing (aggregate type and id), type, JSON payload and headers."""

    aggregate_type: str
    aggregate_id: str
    event_type: str
    payload: Any
    headers: Mapping[str, str] = field(default_factory=dict)
    event_id: uuid.UUID = field(default_factory=uuid.uuid4)
    schema_version: int = SCHEMA_VERSION
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    @property
    def traceparent(self) -> str | None:
        """The W3C trace context carried with the event, if any."""
        return self.headers.get(TRACEPARENT)


def _check_name(what: str, value: object, *, topic_safe: bool = False) -> str:
    if not isinstance(value, str):
        raise InvalidEvent(f"{what} must be a string, got {type(value).__name__}")
    if not value.strip():
        raise InvalidEvent(f"{what} must not be empty")
    if len(value) > MAX_NAME_LENGTH:
        raise InvalidEvent(
            f"{what} is {len(value)} characters long; the limit is {MAX_NAME_LENGTH}"
        )
    if topic_safe and not _TOPIC_SAFE.match(value):
        raise InvalidEvent(
            f"{what} {value!r} becomes part of a Kafka topic name: "
            "use only letters, digits, '.', '_' and '-'"
        )
    return value


def _check_headers(headers: Mapping[str, Any] | None) -> dict[str, str]:
    if headers is None:
        return {}
    if not isinstance(headers, Mapping):
        raise InvalidEvent(f"headers must be a mapping of str to str, got {type(headers).__name__}")
    checked: dict[str, str] = {}
    for key, value in headers.items():
        if not isinstance(key, str) or not key:
            raise InvalidEvent(f"header names must be non-empty strings, got {key!r}")
        if not isinstance(value, str):
            raise InvalidEvent(
                f"header {key!r} must be a string, got {type(value).__name__}: "
                "encode it yourself (e.g. str() or json.dumps())"
            )
        checked[key] = value
    tp = checked.get(TRACEPARENT)
    if tp is not None and not _TRACEPARENT.match(tp):
        raise InvalidEvent(f"header 'traceparent' is not a W3C trace context: {tp!r}")
    return checked


def encode_payload(payload: Any, *, max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> str:
    """Serialise a payload to JSON text, or raise InvalidEvent saying why it cannot travel."""
    try:
        text = json.dumps(payload, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidEvent(f"payload is not JSON serialisable: {exc}") from exc
    size = len(text.encode("utf-8"))
    if size > max_bytes:
        raise InvalidEvent(
            f"payload is {size} bytes of JSON; the limit is {max_bytes}. "
            "Store large documents elsewhere and publish a reference to them"
        )
    if _ESCAPED_NUL.search(text):
        raise InvalidEvent("payload contains a NUL character, which Postgres jsonb cannot store")
    return text


def make_envelope(
    *,
    aggregate_type: str,
    aggregate_id: str,
    event_type: str,
    payload: Any,
    headers: Mapping[str, str] | None = None,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
) -> tuple[Envelope, str]:
    """Validate every field and return the envelope with its payload encoded as JSON text."""
    envelope = Envelope(
        aggregate_type=_check_name("aggregate_type", aggregate_type, topic_safe=True),
        aggregate_id=_check_name("aggregate_id", aggregate_id),
        event_type=_check_name("event_type", event_type),
        payload=payload,
        headers=_check_headers(headers),
    )
    return envelope, encode_payload(payload, max_bytes=max_payload_bytes)
