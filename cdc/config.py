"""Pure builder: settings in, Debezium Postgres connector config (with EventRouter) out."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from outboxkit.kernel.wire import (
    DEFAULT_MESSAGE_PREFIX,
    HEADER_COLUMNS,
    SOURCE,
    SOURCE_IDENTITY,
    SOURCE_POSITION,
)
from outboxkit.kernel.wire.record import DEFAULT_TOPIC_PREFIX, topic_for, topic_prefix_problem

CONNECTOR_CLASS = "io.debezium.connector.postgresql.PostgresConnector"
EVENT_ROUTER = "io.debezium.transforms.outbox.EventRouter"
STRING_CONVERTER = "org.apache.kafka.connect.storage.StringConverter"
JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"
TOPIC_NAME_MATCHES = "org.apache.kafka.connect.transforms.predicates.TopicNameMatches"
DECODE_MESSAGE = "io.debezium.connector.postgresql.transforms.DecodeLogicalDecodingMessageContent"
# outboxkit's own transform (cdc/java/smt; on the worker's classpath, or the Connect
# image's plugin path in deploy/): Kafka's HeaderFrom reads top-level fields only, not source.*.
SOURCE_POSITION_HEADERS = "io.outboxkit.connect.SourcePositionHeaders"
INSERT_HEADER = "org.apache.kafka.connect.transforms.InsertHeader"  # Kafka's own (KIP-145)

# Defaults of the connector settings (the stack's settings start from the same ones).
DEFAULT_SERVER_NAME = "outboxkit"
DEFAULT_SLOT_NAME = DEFAULT_PUBLICATION_NAME = "outboxkit_outbox"
DEFAULT_HEARTBEAT_INTERVAL_MS = 10_000
# How long Debezium waits for more changes before handing a batch to Connect. Debezium's own
# default, 500 ms, is most of a hop's latency on a quiet stream (commit -> Kafka p50 0.51 s vs
# 0.05 s at 50 ms); a busy stream fills max.batch.size before the wait ends either way.
DEFAULT_POLL_INTERVAL_MS = 50
DEFAULT_PAYLOAD_ENCODING: Final = "text"


class ConnectorConfigError(ValueError):
    """The connector settings cannot produce a valid Debezium config."""


@dataclass(frozen=True)
class ConnectorSettings:
    """What the builder needs to know; every field maps to one or a few connector properties.

    Attributes:
        name: The connector's name in Kafka Connect.
        database_host: The Postgres host the connector reads the WAL from (``database.hostname``).
        database_port: Its port (``database.port``).
        database_name: The database holding the outbox tables (``database.dbname``).
        database_user: A user with the replication privilege (``database.user``).
        database_password: Its password (``database.password``); empty when the worker
            supplies it another way.
        server_name: The connector's logical name, ``topic.prefix``: one per source database,
            the name the inbox dedups source positions by.
        slot_name: The replication slot (``slot.name``): lower-case letters, digits,
            underscores, at most 63.
        publication_name: The Postgres publication the slot reads (``publication.name``).
        outbox_tables: The captured outbox tables, each written ``schema.table``.
        heartbeat_table: The table the connector's heartbeat updates, so the slot moves on while
            no event is written; None: no heartbeat query.
        heartbeat_interval_ms: How often the heartbeat runs, in ms; 0 disables it.
        poll_interval_ms: How long Debezium waits for more changes before handing a batch to
            Connect (``poll.interval.ms``), in ms.
        topic_prefix: The prefix of the Kafka topics events are routed to, before the aggregate
            type (``outbox.event.order``).
        snapshot_mode: Debezium's ``snapshot.mode``; ``no_data`` starts from the slot without
            reading existing rows.
        publication_autocreate: Debezium's ``publication.autocreate.mode``.
        payload_encoding: ``text``: the value is the payload's JSON text as stored (any JSON,
            nulls kept, no schema). ``expand``: EventRouter turns the payload into a Connect
            struct (for schema-aware converters); it infers a schema per record and falls back
            to a JSON *string* when it cannot, e.g. for an array mixing numbers and objects, so
            consumers would see two shapes for one event type.
        exactly_once: Records and source offsets commit in one Kafka transaction per poll
            (KIP-618); registration fails on a worker without
            ``exactly.once.source.support=enabled``.
        message_prefix: Message mode: the connector also captures transactional logical
            decoding messages with this prefix and turns each into the record an outbox row
            gives; None: no messages.
        source_identity: The captured database's identity, ``<system_identifier>/<database
            name>`` (`cdc.identity`), written as the `SOURCE_IDENTITY` header on every record;
            None: no such header.
        extra: Connector properties set as given, over the built ones.
    """

    name: str
    database_host: str
    database_port: int
    database_name: str
    database_user: str
    database_password: str = ""
    server_name: str = DEFAULT_SERVER_NAME
    slot_name: str = DEFAULT_SLOT_NAME
    publication_name: str = DEFAULT_PUBLICATION_NAME
    outbox_tables: Sequence[str] = ("public.outbox",)
    heartbeat_table: str | None = "public.outbox_heartbeat"
    heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS
    poll_interval_ms: int = DEFAULT_POLL_INTERVAL_MS
    topic_prefix: str = DEFAULT_TOPIC_PREFIX
    snapshot_mode: str = "no_data"
    publication_autocreate: str = "filtered"
    payload_encoding: str = DEFAULT_PAYLOAD_ENCODING
    exactly_once: bool = True
    message_prefix: str | None = DEFAULT_MESSAGE_PREFIX
    source_identity: str | None = None
    extra: dict[str, str] = field(default_factory=dict)


def _check(settings: ConnectorSettings) -> None:
    if not settings.outbox_tables:
        raise ConnectorConfigError("at least one outbox table is needed")
    for table in (*settings.outbox_tables, settings.heartbeat_table or "public.x"):
        if not re.fullmatch(r"[A-Za-z_][\w]*\.[A-Za-z_][\w]*", table):
            raise ConnectorConfigError(f"table {table!r} must be written schema.table")
    if not re.fullmatch(r"[a-z0-9_]{1,63}", settings.slot_name):
        raise ConnectorConfigError(
            f"slot name {settings.slot_name!r}: lower-case letters, digits, underscores only"
        )
    if settings.payload_encoding not in ("text", "expand"):
        raise ConnectorConfigError(
            f"payload_encoding must be 'text' or 'expand', not {settings.payload_encoding!r}"
        )
    if settings.heartbeat_interval_ms < 0:
        raise ConnectorConfigError("heartbeat_interval_ms must be >= 0 (0 disables heartbeats)")
    if settings.poll_interval_ms < 1:
        raise ConnectorConfigError("poll_interval_ms must be >= 1")
    problem = topic_prefix_problem(settings.topic_prefix)
    if problem is not None:
        raise ConnectorConfigError(problem)
    identity = settings.source_identity
    # "${" would make Connect read the value as a config-provider reference.
    if identity is not None and (not re.fullmatch(r"[0-9]+/.+", identity) or "${" in identity):
        raise ConnectorConfigError(
            f"source identity {identity!r}: expected <system_identifier>/<database name>, "
            "the database's name without '${'"
        )


def outbox_topic_pattern(settings: ConnectorSettings) -> str:
    """Regex for the raw Debezium topics of the outbox tables and of the captured messages
    (before routing)."""
    raw = [f"{settings.server_name}.{t}" for t in settings.outbox_tables]
    if settings.message_prefix is not None:
        raw.append(message_topic(settings))
    return "^(" + "|".join(re.escape(name) for name in raw) + ")$"


def message_topic(settings: ConnectorSettings) -> str:
    """The raw topic Debezium gives logical decoding messages (before routing)."""
    return f"{settings.server_name}.message"


def build_connector_config(settings: ConnectorSettings) -> dict[str, str]:
    """The Kafka Connect config of the outbox connector, every value a string.

    Args:
        settings: The connector's settings.

    Raises:
        ConnectorConfigError: Settings that cannot give a valid config (the message says which).
    """
    _check(settings)
    captured = list(settings.outbox_tables)
    if settings.heartbeat_table and settings.heartbeat_interval_ms:
        captured.append(settings.heartbeat_table)
    placement = ",".join(f"{column}:header:{header}" for column, header in HEADER_COLUMNS)
    config = {
        "connector.class": CONNECTOR_CLASS,
        "tasks.max": "1",
        "plugin.name": "pgoutput",
        "database.hostname": settings.database_host,
        "database.port": str(settings.database_port),
        "database.user": settings.database_user,
        "database.password": settings.database_password,
        "database.dbname": settings.database_name,
        "topic.prefix": settings.server_name,
        "slot.name": settings.slot_name,
        "publication.name": settings.publication_name,
        "publication.autocreate.mode": settings.publication_autocreate,
        "table.include.list": ",".join(captured),
        "snapshot.mode": settings.snapshot_mode,
        "poll.interval.ms": str(settings.poll_interval_ms),
        # Only inserts matter: delete-mode rows are removed in the same transaction, and the
        # heartbeat row is only ever updated (its WAL still moves the slot's position on).
        "skipped.operations": "u,d,t",
        "tombstones.on.delete": "false",
        # Connect creates a new aggregate type's topic itself (KIP-158), with the broker's
        # default partitions and replication, so an event of a new type cannot stall the
        # connector on a cluster whose brokers do not auto-create topics.
        "topic.creation.default.partitions": "-1",
        "topic.creation.default.replication.factor": "-1",
        "extended.headers.enabled": "false",
        "key.converter": STRING_CONVERTER,
        "value.converter": STRING_CONVERTER,
        "transforms": "position,outbox",
        # The event's source and its position there (source.name and source.sequence of the
        # change event) as headers, before the router replaces the value (it keeps a record's
        # headers): what the inbox dedups by when offsets change meaning.
        "transforms.position.type": SOURCE_POSITION_HEADERS,
        "transforms.position.name.header": SOURCE,
        "transforms.position.position.header": SOURCE_POSITION,
        "transforms.position.predicate": "isOutboxTable",
        "transforms.outbox.type": EVENT_ROUTER,
        "transforms.outbox.predicate": "isOutboxTable",
        "transforms.outbox.table.field.event.id": "id",
        "transforms.outbox.table.field.event.key": "aggregateid",
        "transforms.outbox.table.field.event.payload": "payload",
        "transforms.outbox.route.by.field": "aggregatetype",
        "transforms.outbox.route.topic.replacement": settings.topic_prefix + "${routedByValue}",
        "transforms.outbox.table.fields.additional.placement": placement,
        "predicates": "isOutboxTable",
        "predicates.isOutboxTable.type": TOPIC_NAME_MATCHES,
        "predicates.isOutboxTable.pattern": outbox_topic_pattern(settings),
    }
    if settings.payload_encoding == "expand":
        config.update(
            {
                "value.converter": JSON_CONVERTER,
                "value.converter.schemas.enable": "false",
                "transforms.outbox.table.expand.json.payload": "true",
                # Without this, JSON nulls vanish from expanded payloads.
                "transforms.outbox.table.json.payload.null.behavior": "optional_bytes",
            }
        )
    config.update(_message_capture(settings))
    if settings.source_identity is not None:
        # Last and without a predicate (the steps before match the raw topics' names): every
        # record the connector writes carries it, whatever the steps before made of it.
        config["transforms"] += ",identity"
        config["transforms.identity.type"] = INSERT_HEADER
        config["transforms.identity.header"] = SOURCE_IDENTITY
        config["transforms.identity.value.literal"] = settings.source_identity
    if settings.exactly_once:
        config["exactly.once.support"] = "required"
        config["transaction.boundary"] = "poll"
    if settings.heartbeat_interval_ms:
        config["heartbeat.interval.ms"] = str(settings.heartbeat_interval_ms)
        if settings.heartbeat_table:
            config["heartbeat.action.query"] = (
                f"UPDATE {settings.heartbeat_table} SET beat_at = now() WHERE id = 1"
            )
    config.update(settings.extra)
    return config


def source_identity_of(config: Mapping[str, str]) -> str | None:
    """The source identity a connector config writes on its records (None: none)."""
    for step in config.get("transforms", "").split(","):
        prefix = f"transforms.{step.strip()}."
        if (
            config.get(prefix + "type") == INSERT_HEADER
            and config.get(prefix + "header") == SOURCE_IDENTITY
        ):
            return config.get(prefix + "value.literal")
    return None


def _message_capture(settings: ConnectorSettings) -> dict[str, str]:
    """Message mode: capture the prefix's messages and decode each one's JSON content into the
    row-shaped struct EventRouter routes (op 'c', ``after``; ``source`` kept, so the position
    step reads it as for a row). Nulls are kept, so a NULL traceparent or headers field gives
    the same null header as an outbox row's NULL column."""
    if settings.message_prefix is None:
        return {"message.prefix.exclude.list": ".*"}
    return {
        "message.prefix.include.list": re.escape(settings.message_prefix),
        "transforms": "decode,position,outbox",
        "transforms.decode.type": DECODE_MESSAGE,
        "transforms.decode.fields.null.include": "true",
        "transforms.decode.predicate": "isMessage",
        "predicates": "isOutboxTable,isMessage",
        "predicates.isMessage.type": TOPIC_NAME_MATCHES,
        "predicates.isMessage.pattern": "^" + re.escape(message_topic(settings)) + "$",
    }


__all__ = [
    "ConnectorConfigError",
    "ConnectorSettings",
    "build_connector_config",
    "message_topic",
    "outbox_topic_pattern",
    "source_identity_of",
    "topic_for",
]
