"""The Kafka record format of outbox events, in one place.

What the outbox connector writes (Debezium's EventRouter with the placement built from
`HEADER_COLUMNS`): topic ``<topic prefix><aggregate type>``, key = the aggregate id, value = the
payload's JSON text, and headers ``id``, ``eventType``, ``aggregateType``, ``traceparent``,
``headers`` (the other headers as one JSON object) and ``schemaVersion``. The record's timestamp
is the commit time, carried into `Envelope.created_at`.

`encode` builds such a record from an envelope (what the connector would write; tests and
benchmarks use it), `read` turns a record back into an envelope or says why it cannot.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from outbox.envelope import TRACEPARENT, Envelope, encode_payload
from outbox.errors import OutboxError

Headers = Sequence[tuple[str, bytes | None]]

DEFAULT_TOPIC_PREFIX = "outbox.event."

# Header names. EventRouter always adds "id" (the event id column); the others come from
# outbox columns placed as headers.
ID = "id"
EVENT_TYPE = "eventType"
AGGREGATE_TYPE = "aggregateType"
EXTRA_HEADERS = "headers"  # the envelope's other headers as one JSON object (or absent)
SCHEMA_VERSION = "schemaVersion"
# Outbox column -> Kafka header name (the connector's additional placement).
HEADER_COLUMNS: tuple[tuple[str, str], ...] = (
    ("type", EVENT_TYPE),
    ("aggregatetype", AGGREGATE_TYPE),
    ("traceparent", TRACEPARENT),
    ("headers", EXTRA_HEADERS),
    ("schema_version", SCHEMA_VERSION),
)


def topic_for(aggregate_type: str, *, topic_prefix: str = DEFAULT_TOPIC_PREFIX) -> str:
    """The Kafka topic the events of one aggregate type are routed to."""
    return topic_prefix + aggregate_type


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


def encode(
    envelope: Envelope,
    *,
    topic_prefix: str = DEFAULT_TOPIC_PREFIX,
    partition: int = 0,
    offset: int = 0,
    timestamp_ms: int | None = None,
) -> KafkaRecord:
    """The record the outbox connector writes for ``envelope`` (at ``partition``/``offset``)."""
    headers: list[tuple[str, bytes | None]] = [
        (ID, str(envelope.event_id).encode()),
        (EVENT_TYPE, envelope.event_type.encode()),
        (AGGREGATE_TYPE, envelope.aggregate_type.encode()),
    ]
    if envelope.traceparent:
        headers.append((TRACEPARENT, envelope.traceparent.encode()))
    extra = {k: v for k, v in envelope.headers.items() if k != TRACEPARENT}
    if extra:
        headers.append((EXTRA_HEADERS, json.dumps(extra, sort_keys=True).encode()))
    headers.append((SCHEMA_VERSION, str(envelope.schema_version).encode()))
    return KafkaRecord(
        topic=topic_for(envelope.aggregate_type, topic_prefix=topic_prefix),
        partition=partition,
        offset=offset,
        key=envelope.aggregate_id.encode(),
        value=encode_payload(envelope.payload).encode(),
        headers=headers,
        timestamp_ms=(
            int(envelope.created_at.timestamp() * 1000) if timestamp_ms is None else timestamp_ms
        ),
    )


def _extra_headers(raw: str | None) -> dict[str, str]:
    if raw is None or raw == "null":
        return {}
    try:
        parsed = json.loads(raw)
    except ValueError as exc:
        raise UndecodableRecord(f"header {EXTRA_HEADERS!r} is not JSON: {raw[:80]!r}") from exc
    if not isinstance(parsed, dict):
        raise UndecodableRecord(f"header {EXTRA_HEADERS!r} is not a JSON object: {raw[:80]!r}")
    return {str(k): str(v) for k, v in parsed.items()}


def decode(record: KafkaRecord) -> Envelope:
    """The envelope carried by one record; raises UndecodableRecord saying what is wrong."""
    found = header_map(record.headers)
    for required in (ID, EVENT_TYPE, AGGREGATE_TYPE):
        if required not in found:
            raise UndecodableRecord(f"header {required!r} is missing")
    if record.key is None:
        raise UndecodableRecord("record has no key (the aggregate id)")
    if record.value is None:
        raise UndecodableRecord("record has no value (the payload)")
    try:
        event_id = uuid.UUID(found[ID])
    except ValueError as exc:
        raise UndecodableRecord(f"header {ID!r} is not a UUID: {found[ID]!r}") from exc
    try:
        payload = json.loads(record.value)
    except ValueError as exc:
        raise UndecodableRecord(f"value is not JSON: {exc}") from exc
    try:
        schema_version = int(found.get(SCHEMA_VERSION, "1"))
    except ValueError as exc:
        raise UndecodableRecord(
            f"header {SCHEMA_VERSION!r} is not an integer: {found[SCHEMA_VERSION][:80]!r}"
        ) from exc
    extra = _extra_headers(found.get(EXTRA_HEADERS))
    if TRACEPARENT in found:
        extra[TRACEPARENT] = found[TRACEPARENT]
    created = (
        datetime.fromtimestamp(record.timestamp_ms / 1000, UTC)
        if record.timestamp_ms
        else datetime.now(UTC)
    )
    return Envelope(
        aggregate_type=found[AGGREGATE_TYPE],
        aggregate_id=record.key.decode("utf-8", errors="replace"),
        event_type=found[EVENT_TYPE],
        payload=payload,
        headers=extra,
        event_id=event_id,
        schema_version=schema_version,
        created_at=created,
    )


@dataclass(frozen=True)
class Decoded:
    """A record read for the inbox: its envelope, or the problem that keeps it from being one.

    ``key``, ``event_id`` and ``event_type`` are known either way (from the headers as far as
    they can be read), so an undecodable record can still be parked under its key."""

    record: KafkaRecord
    envelope: Envelope | None
    problem: str | None
    key: str | None
    event_id: str | None
    event_type: str | None


def read(record: KafkaRecord) -> Decoded:
    """`decode` that never raises for a bad record: the problem is returned instead."""
    key = None if record.key is None else record.key.decode("utf-8", "replace")
    try:
        envelope = decode(record)
    except UndecodableRecord as exc:
        found = header_map(record.headers)
        return Decoded(record, None, str(exc), key, found.get(ID), found.get(EVENT_TYPE))
    return Decoded(record, envelope, None, key, str(envelope.event_id), envelope.event_type)
