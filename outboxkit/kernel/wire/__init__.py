"""The record format, in one package: what an event looks like on Kafka.

- here: the header names, which outbox column the EventRouter places in which header, and the
  record's size as Kafka counts it against its limits (what the envelope's validation and the
  connector's diagnosis both need);
- `outboxkit.kernel.wire.record`: whole records, encode (what the connector writes for an
  envelope) and decode (a record back to its envelope, or why it is not one), side by side;
- `outboxkit.kernel.wire.jsonb`: what Postgres makes of a payload in a ``jsonb`` column, as
  Debezium sends it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from outboxkit.kernel.wire.jsonb import utf8_size

TRACEPARENT = "traceparent"
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

# The event's place in its source, copied by the connector from Debezium's change event (its
# ``source`` block) before the EventRouter replaces the value: the connector's logical name
# (``topic.prefix``, one per source database) and Debezium's ``sequence``, the JSON array
# ``["<last commit LSN>", "<this change's LSN>"]``, which grows in the order the WAL's
# transactions committed (`inbox.position`). The inbox dedups by it across topics, partitions
# and clusters, where offsets change.
SOURCE = "sourceName"
SOURCE_POSITION = "sourcePosition"
# The source database's identity, "<system_identifier>/<database name>" (Postgres's
# pg_control_system() and current_database()), as `outboxkit cdc apply` read it: the connector
# writes it on every record. A new cluster (initdb, a logical restore) has a new one; a
# physical replica shares its primary's.
SOURCE_IDENTITY = "sourceIdentity"
# The most those three headers add to a record: their framing and names, a connector name of
# up to 255 bytes, two 20-digit LSNs in their JSON array, and the identity (a 20-digit system
# identifier, a slash, a database name of up to 63 bytes).
SOURCE_HEADERS_BYTES = (
    255
    + len('["18446744073709551615","18446744073709551615"]')
    + 20
    + 1
    + 63
    + sum(10 + len(name) for name in (SOURCE, SOURCE_POSITION, SOURCE_IDENTITY))
)

# Message mode: the prefix of the transactional logical decoding messages that carry events
# (pg_logical_emit_message); the connector captures only messages with this prefix. Each
# message's content is a JSON object with the outbox columns as fields, the payload and the
# headers as their jsonb text (strings), so the record is the one an outbox row gives.
DEFAULT_MESSAGE_PREFIX = "outbox"

# Kafka's framing of a record sent alone (upper bounds, as the producer estimates it): batch
# header 61 + record framing 21 + length varints of key, value and header count 15 = 97.
RECORD_OVERHEAD_BYTES = 128
HEADER_OVERHEAD_BYTES = 10  # the varints of a header's name and value lengths


def row_headers(columns: Mapping[str, str | None]) -> list[tuple[str, str | None]]:
    """The headers the connector writes for an outbox row, given its columns' text (``id`` and
    the placed columns; a missing column is a null header)."""
    return [(ID, columns.get("id")), *((name, columns.get(col)) for col, name in HEADER_COLUMNS)]


def record_size(
    key: str | None, value: str | None, headers: Iterable[tuple[str, str | None]]
) -> int:
    """Bytes of the Kafka record with this key, value and headers (text, as UTF-8), framing
    included: what the producer's max.request.size and the broker's message.max.bytes see,
    as an upper bound."""
    size = RECORD_OVERHEAD_BYTES + utf8_size(key or "") + utf8_size(value or "")
    for name, header in headers:
        size += HEADER_OVERHEAD_BYTES + utf8_size(name) + utf8_size(header or "")
    return size
