"""The outbox connector and its capture as settings (environment ``OUTBOXKIT_``): the database as
Kafka Connect reaches it, the CDC role and where its password is, the topics and the capture's
tables; and `connector_settings`, which turns them into the builder's `ConnectorSettings`. The
operator commands (`outboxkit cdc prepare`, `outboxkit cdc apply`), the dev stack and the
deployment manifests all build the connector from these, so the three cannot disagree."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from sqlalchemy.engine import URL

from cdc.config import (
    DEFAULT_HEARTBEAT_INTERVAL_MS,
    DEFAULT_PAYLOAD_ENCODING,
    DEFAULT_POLL_INTERVAL_MS,
    DEFAULT_SERVER_NAME,
    ConnectorConfigError,
    ConnectorSettings,
    build_connector_config,
)
from cdc.endpoints import EndpointSettings, postgres_identifier
from outboxkit.kernel import engines
from outboxkit.kernel.secrets import read_secret, setting_name
from outboxkit.kernel.wire import DEFAULT_MESSAGE_PREFIX
from outboxkit.kernel.wire.record import TopicPrefixSettings

DEFAULT_CDC_ROLE = "outboxkit_cdc"
# A Kafka Connect config-provider reference: ${provider:[path:]key}. Connect resolves it on the
# worker, so its REST API, its config topic and its logs only ever show the reference.
_REFERENCE = re.compile(r"\$\{[A-Za-z0-9_.-]+:[^{}]+\}")
MASK = "********"


class CdcSettings(TopicPrefixSettings, EndpointSettings):
    """The outbox connector: how Connect reaches the database, as which role, and what it
    captures and where it routes it."""

    connect_database_host: str | None = Field(
        default=None,
        description="the Postgres host Kafka Connect reaches, when it differs from "
        "database_url's (another network, a container name)",
    )
    connect_database_port: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description="the Postgres port Kafka Connect reaches, when it differs from database_url's",
    )
    cdc_role: str = Field(
        default=DEFAULT_CDC_ROLE,
        description="the login role the connector uses: REPLICATION, SELECT on the outbox "
        "tables (and UPDATE on the heartbeat row), nothing else",
    )
    cdc_password_reference: str | None = Field(
        default=None,
        description="the CDC role's password as a Kafka Connect config-provider reference, e.g. "
        "${file:/opt/kafka/secrets/cdc.properties:password} (the worker resolves it; the "
        "connector's config shows only the reference); unset: the password from "
        "cdc_password_file goes into the connector's config",
        examples=["${file:/opt/kafka/secrets/cdc.properties:password}"],
    )
    cdc_password_file: Path | None = Field(
        default=None,
        description="file holding the CDC role's password (a mounted secret): `outboxkit cdc "
        "prepare` sets the role's password from it",
    )
    server_name: str = Field(
        default=DEFAULT_SERVER_NAME,
        description="Debezium's topic.prefix, the logical name of the source database: one per "
        "database, the name the inbox dedups source positions by",
    )
    outbox_tables: list[str] = Field(
        default_factory=lambda: ["public.outbox"],
        description="the captured outbox tables, each schema.table (JSON list in the environment)",
        examples=[["public.outbox"]],
    )
    heartbeat_table: str | None = Field(
        default="public.outbox_heartbeat",
        description="the table the connector's heartbeat updates (the framework's migrations "
        "create it), so the slot moves on while no event is written; empty: none",
    )
    heartbeat_interval_ms: int = Field(
        default=DEFAULT_HEARTBEAT_INTERVAL_MS,
        ge=0,
        description="Debezium's heartbeat.interval.ms: how often the slot advances on a quiet "
        "outbox; 0: no heartbeat",
    )
    poll_interval_ms: int = Field(
        default=DEFAULT_POLL_INTERVAL_MS, ge=1, description="Debezium's poll.interval.ms"
    )
    payload_encoding: Literal["text", "expand"] = Field(
        default=DEFAULT_PAYLOAD_ENCODING,
        description="how EventRouter writes the payload: text (its JSON text as stored) or "
        "expand (a Connect struct, for schema-aware converters; two shapes for one event type "
        "where it cannot infer a schema)",
    )
    message_prefix: str | None = Field(
        default=DEFAULT_MESSAGE_PREFIX,
        description="prefix of the logical decoding messages the connector captures (message "
        "mode); empty: none",
    )
    connect_exactly_once: bool = Field(
        default=True,
        description="KIP-618: Debezium's records and source offsets commit in one Kafka "
        "transaction; the Connect workers need exactly.once.source.support=enabled",
    )

    @field_validator("message_prefix")
    @classmethod
    def _empty_is_none(cls, value: str | None) -> str | None:
        return value or None  # OUTBOXKIT_MESSAGE_PREFIX= (empty): capture no messages

    @field_validator("heartbeat_table")
    @classmethod
    def _heartbeat_table(cls, value: str | None) -> str | None:
        return _qualified(value) if value else None  # empty: no heartbeat

    @field_validator("outbox_tables")
    @classmethod
    def _outbox_tables(cls, value: list[str]) -> list[str]:
        return [_qualified(table) for table in value]

    @field_validator("cdc_role")
    @classmethod
    def _role_identifier(cls, value: str) -> str:
        return postgres_identifier(value)

    @field_validator("cdc_password_reference")
    @classmethod
    def _a_reference(cls, value: str | None) -> str | None:
        if value and not _REFERENCE.fullmatch(value):
            # Never echo the value: it may be the password itself.
            raise ValueError(
                "cdc_password_reference must be a Kafka Connect config-provider reference "
                "such as ${file:/path/cdc.properties:password}, not a password; put the "
                "password in a file and set cdc_password_file"
            )
        return value or None


def _qualified(table: str) -> str:
    """``table`` when written schema.table; ValueError otherwise."""
    if not re.fullmatch(r"[A-Za-z_]\w*\.[A-Za-z_]\w*", table):
        raise ValueError(f"table {table!r} must be written schema.table, e.g. public.outbox")
    return table


def connector_settings(
    settings: CdcSettings, database_url: str | URL | None = None
) -> ConnectorSettings:
    """The outbox connector's settings from ``settings``: the database as Connect reaches it
    (``database_url``'s, else the settings', with connect_database_host/port over them), the
    CDC role with its password reference, and the capture. The publication is not left to
    Debezium: the CDC role cannot create one (`outboxkit cdc prepare` does).

    Args:
        settings: The CDC settings.
        database_url: The outbox's database (e.g. resolved from the local stack); None: the
            settings' database_url.

    Raises:
        ConnectorConfigError: No database is known, or it names no database.
    """
    given = database_url or settings.database_url
    url = engines.database_url(given) if given else None
    if url is None or not url.database:
        raise ConnectorConfigError(
            "the connector needs the outbox's database: set OUTBOXKIT_DATABASE_URL "
            "(postgresql+psycopg://user@host:port/database)"
        )
    return ConnectorSettings(
        name=settings.connector_name,
        database_host=settings.connect_database_host or url.host or "127.0.0.1",
        database_port=settings.connect_database_port or url.port or 5432,
        database_name=url.database,
        database_user=settings.cdc_role,
        database_password=settings.cdc_password_reference or "",
        server_name=settings.server_name,
        slot_name=settings.slot_name,
        publication_name=settings.publication_name,
        outbox_tables=tuple(settings.outbox_tables),
        heartbeat_table=settings.heartbeat_table,
        heartbeat_interval_ms=settings.heartbeat_interval_ms,
        poll_interval_ms=settings.poll_interval_ms,
        topic_prefix=settings.topic_prefix,
        publication_autocreate="disabled",
        payload_encoding=settings.payload_encoding,
        exactly_once=settings.connect_exactly_once,
        message_prefix=settings.message_prefix,
    )


def per_database(settings: CdcSettings, name: str) -> CdcSettings:
    """``settings`` for one of several outbox databases captured through one Connect cluster:
    the connector, server name, slot and publication suffixed with ``name`` (how the example's
    services are captured, on the dev stack and in the rendered manifests alike).

    Args:
        settings: The CDC settings shared by every database.
        name: The database's (its service's) name.
    """
    return settings.model_copy(
        update={
            "connector_name": f"{settings.connector_name}-{name}",
            "server_name": f"{settings.server_name}_{name}",
            "slot_name": f"{settings.slot_name}_{name}"[:63],
            "publication_name": f"{settings.publication_name}_{name}"[:63],
        }
    )


def connector_password(settings: CdcSettings) -> str:
    """What the connector's ``database.password`` holds: the reference, else the password read
    from cdc_password_file.

    Args:
        settings: The CDC settings.

    Raises:
        ConnectorConfigError: Neither is set.
    """
    if settings.cdc_password_reference:
        return settings.cdc_password_reference
    if settings.cdc_password_file is not None:
        return read_secret(settings.cdc_password_file, setting_name(settings, "cdc_password_file"))
    raise ConnectorConfigError(
        "the connector needs the CDC role's password: set OUTBOXKIT_CDC_PASSWORD_REFERENCE "
        "(a Kafka Connect config-provider reference) or OUTBOXKIT_CDC_PASSWORD_FILE"
    )


def connector_config(
    settings: CdcSettings, database_url: str | URL | None = None, identity: str | None = None
) -> dict[str, str]:
    """The outbox connector's whole config as `outboxkit cdc apply` puts it (and `outboxkit
    doctor` expects it): `connector_settings` with `connector_password`.

    Args:
        settings: The CDC settings.
        database_url: The outbox's database; None: the settings' database_url.
        identity: The database's identity (`cdc.identity.database_identity`), written on every
            record; None: none.
    """
    cs = connector_settings(settings, database_url)
    password = connector_password(settings)
    return build_connector_config(replace(cs, database_password=password, source_identity=identity))


def role_password(settings: CdcSettings) -> str:
    """The CDC role's password, from cdc_password_file (what `outboxkit cdc prepare` sets).

    Args:
        settings: The CDC settings.

    Raises:
        ConnectorConfigError: cdc_password_file is not set.
    """
    if settings.cdc_password_file is None:
        raise ConnectorConfigError(
            "set OUTBOXKIT_CDC_PASSWORD_FILE: the file holding the CDC role's password"
        )
    return read_secret(settings.cdc_password_file, setting_name(settings, "cdc_password_file"))


def masked(config: dict[str, str]) -> dict[str, str]:
    """``config`` fit to print: a password that is not a config-provider reference masked.

    Args:
        config: A connector's config.
    """
    shown = dict(config)
    for key, value in config.items():
        if "password" in key and value and not _REFERENCE.fullmatch(value):
            shown[key] = MASK
    return shown


__all__ = [
    "CdcSettings",
    "connector_password",
    "connector_settings",
    "masked",
    "per_database",
    "role_password",
]
