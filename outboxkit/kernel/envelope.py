"""The event envelope: what a service publishes and what a consumer receives."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from outboxkit.kernel.errors import InvalidEvent
from outboxkit.kernel.wire import (
    SOURCE_HEADERS_BYTES,
    TRACEPARENT,
    record_size,
    row_headers,
)
from outboxkit.kernel.wire.jsonb import check_storable, render, size_bound, utf8_size

MAX_NAME_LENGTH = 255
# Kafka topic names have at most 249 characters; the rest is the topic prefix's (see
# outboxkit.kernel.wire.record.MAX_TOPIC_PREFIX_LENGTH).
MAX_AGGREGATE_TYPE_LENGTH = 200
# The largest payload publish accepts, in bytes of its jsonb text (the Kafka record value, see
# outboxkit.kernel.wire.jsonb), not of the JSON we insert: the rendering adds a space after every
# ',' and ':' and writes floats out in full.
DEFAULT_MAX_PAYLOAD_BYTES = 900_000
# The largest Kafka record publish accepts, as the connector writes it (see `wire_size`): key +
# value as jsonb renders it + every header name and value (id, eventType, aggregateType,
# traceparent, the other headers as jsonb-rendered JSON, schemaVersion) + the framing allowance
# below. A record over Kafka's default limits (the producer's max.request.size, 1,048,576 bytes;
# the broker's message.max.bytes, 1,048,588) fails the connector for good, so stay well below.
# With the defaults a record cannot reach it: 900,000 of payload + 65,536 of headers + at most
# 2,575 for the rest (names at their limits, in 4-byte characters where they may be) is
# 968,111 bytes.
DEFAULT_MAX_RECORD_BYTES = 1_000_000
# Caps on the headers besides traceparent (they travel as one JSON object, in one Kafka header).
MAX_HEADERS = 64
MAX_HEADER_NAME_LENGTH = 255
MAX_HEADERS_BYTES = 64 * 1024  # of the headers' jsonb text
SCHEMA_VERSION = 1

# The aggregate type becomes part of a Kafka topic name, so it must be a legal topic fragment.
_TOPIC_SAFE = re.compile(r"[A-Za-z0-9._-]+")  # fullmatch: "$" would let a final "\n" in
# W3C Trace Context: version-traceid-parentid-flags, lower-case hex.
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")


@dataclass(frozen=True)
class Envelope:
    """One event: identity, routing (aggregate type and id), type, JSON payload and headers.

    Attributes:
        aggregate_type: What the event is about (``order``); it names the Kafka topic.
        aggregate_id: Which one (``o-1``): the Kafka key, so one aggregate's events keep order.
        event_type: What happened (``OrderPlaced``).
        payload: The event's body, a JSON value.
        headers: The event's other headers, text names and values (``traceparent`` among them).
        event_id: The event's unique id, the inbox's deduplication key; a new one by default.
        schema_version: The envelope format's version (not the payload's).
        created_at: When the event was published (UTC); now by default.
    """

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
    if topic_safe and len(value) > MAX_AGGREGATE_TYPE_LENGTH:
        raise InvalidEvent(
            f"{what} is {len(value)} characters long; it becomes part of a Kafka topic name "
            f"(at most 249 characters with the topic prefix): the limit is "
            f"{MAX_AGGREGATE_TYPE_LENGTH}"
        )
    if topic_safe and not _TOPIC_SAFE.fullmatch(value):
        raise InvalidEvent(
            f"{what} {value!r} becomes part of a Kafka topic name: "
            "use only letters, digits, '.', '_' and '-'"
        )
    _check_text(what, value)
    return value


def _check_text(what: str, value: str) -> None:
    """Postgres text holds neither NUL nor lone surrogates (which are not UTF-8)."""
    if "\x00" in value:
        raise InvalidEvent(f"{what} contains a NUL character, which Postgres cannot store")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidEvent(f"{what} contains a lone surrogate, which is not UTF-8") from None


def _check_headers(headers: Mapping[str, Any] | None) -> dict[str, str]:
    if headers is None:
        return {}
    if not isinstance(headers, Mapping):
        raise InvalidEvent(f"headers must be a mapping of str to str, got {type(headers).__name__}")
    extra = len(headers) - (TRACEPARENT in headers)
    if extra > MAX_HEADERS:
        raise InvalidEvent(
            f"{extra} headers besides traceparent, {extra - MAX_HEADERS} over the limit of "
            f"{MAX_HEADERS}: put the rest in the payload"
        )
    checked: dict[str, str] = {}
    for key, value in headers.items():
        if not isinstance(key, str) or not key:
            raise InvalidEvent(f"header names must be non-empty strings, got {key!r}")
        if len(key) > MAX_HEADER_NAME_LENGTH:
            raise InvalidEvent(
                f"header name {key[:40]!r}... is {len(key)} characters long; "
                f"the limit is {MAX_HEADER_NAME_LENGTH}"
            )
        if not isinstance(value, str):
            raise InvalidEvent(
                f"header {key!r} must be a string, got {type(value).__name__}: "
                "encode it yourself (e.g. str() or json.dumps())"
            )
        _check_text(f"header name {key!r}", key)
        _check_text(f"header {key!r}", value)
        checked[key] = value
    tp = checked.get(TRACEPARENT)
    if tp is not None and not _TRACEPARENT.fullmatch(tp):
        raise InvalidEvent(f"header 'traceparent' is not a W3C trace context: {tp!r}")
    return checked


def extra_headers(envelope: Envelope) -> dict[str, str]:
    """The headers besides traceparent: the outbox ``headers`` column, one Kafka header."""
    return {k: v for k, v in envelope.headers.items() if k != TRACEPARENT}


def _encode(payload: Any, max_bytes: int, *, exact: bool = False) -> tuple[str, int]:
    """The payload as compact JSON (what we insert) and the size of its jsonb text (what Kafka
    carries): an upper bound from the compact text where one exists and is within ``max_bytes``,
    else, or with ``exact``, the size of the text rendered as jsonb writes it."""
    try:
        compact = json.dumps(payload, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidEvent(f"payload is not JSON serialisable: {exc}") from exc
    except RecursionError:
        raise InvalidEvent("payload is not JSON serialisable: it is nested too deeply") from None
    try:
        check_storable(compact)  # what rendering refuses, found in the text
        bound = None if exact else size_bound(compact)
        if bound is not None and bound <= max_bytes:
            return compact, bound
        size = utf8_size(render(payload))
    except ValueError as exc:
        raise InvalidEvent(f"payload cannot be stored as Postgres jsonb: {exc}") from exc
    if size > max_bytes:
        compact_size = utf8_size(compact)
        floats = " jsonb writes floats out in full (1e300: 301 digits)." * (size > 2 * compact_size)
        raise InvalidEvent(
            f"payload is {size} bytes as Postgres jsonb writes it (the Kafka record value), "
            f"{size - max_bytes} over the limit of {max_bytes}; as compact JSON it is "
            f"{compact_size}.{floats} Store large documents elsewhere and publish a reference"
        )
    return compact, size


def encode_payload(payload: Any, *, max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> str:
    """Serialise a payload to compact JSON text, or raise InvalidEvent saying why it cannot
    travel (``max_bytes`` limits its jsonb text, what the Kafka record carries)."""
    return _encode(payload, max_bytes)[0]


def _header_values(envelope: Envelope, headers_text: str | None) -> dict[str, str | None]:
    """The value of each outbox column the connector places in a header, as its text."""
    return {
        "type": envelope.event_type,
        "aggregatetype": envelope.aggregate_type,
        "traceparent": envelope.traceparent,
        "headers": headers_text,
        "schema_version": str(envelope.schema_version),
    }


def wire_size(envelope: Envelope, value_text: str, headers_text: str | None) -> int:
    """Bytes of the Kafka record the connector writes for ``envelope`` (an upper bound), given
    the jsonb text of its payload and of its other headers (None when it has none)."""
    return _record_bytes(envelope, utf8_size(value_text), headers_text)


def _record_bytes(envelope: Envelope, value_bytes: int, headers_text: str | None) -> int:
    """`wire_size` given the size of the payload's jsonb text instead of the text."""
    columns = {"id": str(envelope.event_id), **_header_values(envelope, headers_text)}
    placed = record_size(envelope.aggregate_id, None, row_headers(columns))
    return placed + SOURCE_HEADERS_BYTES + value_bytes


# What `_record_bytes` counts besides the payload and the columns' text: the framing, and each
# header's overhead and name (the header names are fixed; `row_headers`).
_FIXED_RECORD_BYTES = SOURCE_HEADERS_BYTES + record_size(
    None, None, ((name, None) for name, _ in row_headers({}))
)


def _record_bound(envelope: Envelope, headers_text: str | None) -> int:
    """An upper bound of `_record_bytes` less the payload's size, without encoding any text: a
    character takes at most 4 bytes of UTF-8 (the id is 36 ASCII characters, the version at
    most 11)."""
    chars = (
        len(envelope.aggregate_id)
        + len(envelope.event_type)
        + len(envelope.aggregate_type)
        + len(envelope.traceparent or "")
        + len(headers_text or "")
    )
    return _FIXED_RECORD_BYTES + 4 * chars + 36 + 11


def _render_headers(headers: dict[str, str]) -> str | None:
    if not headers:
        return None
    text = render(headers)  # names and values were checked: it cannot fail
    size = utf8_size(text)
    if size > MAX_HEADERS_BYTES:
        raise InvalidEvent(
            f"headers are {size} bytes as Postgres jsonb writes them, "
            f"{size - MAX_HEADERS_BYTES} over the limit of {MAX_HEADERS_BYTES}: "
            "put large values in the payload"
        )
    return text


def make_envelope(
    *,
    aggregate_type: str,
    aggregate_id: str,
    event_type: str,
    payload: Any,
    headers: Mapping[str, str] | None = None,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
) -> tuple[Envelope, str]:
    """Validate every field and the Kafka record's size; return the envelope with its payload
    encoded as compact JSON text (Postgres renders it as jsonb).

    Args:
        aggregate_type: What the event is about; a legal Kafka topic fragment.
        aggregate_id: Which one: the Kafka key.
        event_type: What happened.
        payload: The event's body, any JSON-serializable value.
        headers: Extra headers, text names and values, or None.
        max_payload_bytes: The largest payload accepted, in bytes of its jsonb text.
        max_record_bytes: The largest whole Kafka record accepted, framing included.

    Raises:
        InvalidEvent: A field that cannot travel, or a payload or record over its limit.
    """
    envelope = Envelope(
        aggregate_type=_check_name("aggregate_type", aggregate_type, topic_safe=True),
        aggregate_id=_check_name("aggregate_id", aggregate_id),
        event_type=_check_name("event_type", event_type),
        payload=payload,
        headers=_check_headers(headers),
    )
    headers_text = _render_headers(extra_headers(envelope))
    compact, value_size = _encode(payload, max_payload_bytes)
    if value_size + _record_bound(envelope, headers_text) <= max_record_bytes:
        return envelope, compact  # nearly every event: no need for the exact size
    size = _record_bytes(envelope, value_size, headers_text)
    if size > max_record_bytes:  # with the payload's exact size, as the record will have it
        value_size = _encode(payload, max_payload_bytes, exact=True)[1]
        size = _record_bytes(envelope, value_size, headers_text)
    if size > max_record_bytes:
        headers_size = 0 if headers_text is None else utf8_size(headers_text)
        raise InvalidEvent(
            f"the Kafka record would be {size} bytes ({value_size} of payload, {headers_size} of "
            f"headers, {size - value_size - headers_size} of key, other headers and framing), "
            f"{size - max_record_bytes} over the limit of {max_record_bytes}"
        )
    return envelope, compact
