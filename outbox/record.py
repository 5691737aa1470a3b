"""Decoding a Kafka record written by the outbox connector back into an Envelope (pure)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from outbox.envelope import TRACEPARENT, Envelope
from outbox.errors import OutboxError

Headers = Sequence[tuple[str, bytes | None]]


@dataclass(frozen=True)
class KafkaRecord:
    """One Kafka record as the inbox and readers see it, copied out of the client."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp_ms: int | None = None


class UndecodableRecord(OutboxError, ValueError):
    """A Kafka record is not an outbox event; the message says which part is wrong."""


def header_map(headers: Headers | None) -> dict[str, str]:
    """Kafka headers as a dict of text (last value wins; null values dropped)."""
    result: dict[str, str] = {}
    for name, value in headers or ():
        if value is not None:
            result[name] = value.decode("utf-8", errors="replace")
    return result


def _extra_headers(raw: str | None) -> dict[str, str]:
    if raw is None or raw == "null":
        return {}
    try:
        parsed = json.loads(raw)
    except ValueError as exc:
        raise UndecodableRecord(f"header 'headers' is not JSON: {raw[:80]!r}") from exc
    if not isinstance(parsed, dict):
        raise UndecodableRecord(f"header 'headers' is not a JSON object: {raw[:80]!r}")
    return {str(k): str(v) for k, v in parsed.items()}


def decode(
    key: bytes | None, value: bytes | None, headers: Headers | None, timestamp_ms: int | None = None
) -> Envelope:
    """The envelope carried by one record; raises UndecodableRecord saying what is missing."""
    found = header_map(headers)
    for required in ("id", "eventType", "aggregateType"):
        if required not in found:
            raise UndecodableRecord(f"header {required!r} is missing")
    if key is None:
        raise UndecodableRecord("record has no key (the aggregate id)")
    if value is None:
        raise UndecodableRecord("record has no value (the payload)")
    try:
        event_id = uuid.UUID(found["id"])
    except ValueError as exc:
        raise UndecodableRecord(f"header 'id' is not a UUID: {found['id']!r}") from exc
    try:
        payload = json.loads(value)
    except ValueError as exc:
        raise UndecodableRecord(f"value is not JSON: {exc}") from exc
    extra = _extra_headers(found.get("headers"))
    if TRACEPARENT in found:
        extra[TRACEPARENT] = found[TRACEPARENT]
    created = (
        datetime.fromtimestamp(timestamp_ms / 1000, UTC) if timestamp_ms else datetime.now(UTC)
    )
    return Envelope(
        aggregate_type=found["aggregateType"],
        aggregate_id=key.decode("utf-8", errors="replace"),
        event_type=found["eventType"],
        payload=payload,
        headers=extra,
        event_id=event_id,
        schema_version=int(found.get("schemaVersion", "1")),
        created_at=created,
    )
