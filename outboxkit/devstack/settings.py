"""Where each stack component lives and how the outbox is relayed (environment ``OUTBOXKIT_``)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from cdc.config import (
    DEFAULT_HEARTBEAT_INTERVAL_MS,
    DEFAULT_PAYLOAD_ENCODING,
    DEFAULT_POLL_INTERVAL_MS,
    DEFAULT_SERVER_NAME,
)
from cdc.endpoints import EndpointSettings, postgres_identifier
from outbox.publish import OutboxMode
from outboxkit.kernel.wire import DEFAULT_MESSAGE_PREFIX
from outboxkit.kernel.wire.record import TopicPrefixSettings


def default_cache_dir() -> Path:
    """Where downloaded jars and distributions are kept (``~/.cache/outboxkit``)."""
    return Path.home() / ".cache" / "outboxkit"


class StackSettings(TopicPrefixSettings, EndpointSettings):
    """The local dev stack: which components it starts (those whose endpoint is unset), their
    shape, and how the outbox is relayed."""

    connect_database_host: str | None = Field(
        default=None,
        description="the host Connect uses to reach Postgres, when it differs from "
        "database_url's (containers)",
    )
    connect_database_port: int | None = Field(
        default=None,
        description="the port Connect uses to reach Postgres, when it differs from database_url's",
    )

    secrets_dir: Path | None = Field(
        default=None,
        description="role passwords, one file per role (<role>.password), generated where "
        "missing; unset: the stack's own directory",
    )
    connect_secrets_dir: str | None = Field(
        default=None,
        description="secrets_dir as the Connect worker sees it (its DirectoryConfigProvider "
        "reads the CDC role's password there); unset: secrets_dir",
    )
    cdc_role: str = Field(
        default="outboxkit_cdc",
        description="the login role the connectors use: REPLICATION, and SELECT on the outbox only",
    )
    cache_dir: Path = Field(
        default_factory=default_cache_dir,
        description="where downloaded jars and distributions are kept (~/.cache/outboxkit)",
    )
    database_name: str = Field(
        default="outboxkit", description="the outbox's database, when database_url names none"
    )

    server_name: str = Field(
        default=DEFAULT_SERVER_NAME, description="Debezium's topic.prefix (the logical server)"
    )
    heartbeat_interval_ms: int = Field(
        default=DEFAULT_HEARTBEAT_INTERVAL_MS,
        description="Debezium's heartbeat.interval.ms: how often the slot advances on a quiet "
        "outbox",
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

    # The connectors capture logical decoding messages with message_prefix whatever the mode.
    outbox_mode: OutboxMode = Field(
        default="delete",
        description="how the saga's services (and their consumers) write events: delete, "
        "retain or message",
    )
    message_prefix: str | None = Field(
        default=DEFAULT_MESSAGE_PREFIX,
        description="prefix of the logical decoding messages the connectors capture (empty: none)",
    )

    connect_exactly_once: bool = Field(
        default=True,
        description="KIP-618: the embedded Connect worker commits Debezium's records and source "
        "offsets in one Kafka transaction; describes an external Connect cluster when "
        "connect_url is set",
    )

    # The shape of the embedded stack: how many processes each engine runs. The defaults are a
    # single node of everything; OUTBOXKIT_CLUSTER=true is the cluster shape (each count can
    # still be set on its own, e.g. OUTBOXKIT_CLUSTER=true OUTBOXKIT_SPARK_WORKERS=3).
    cluster: bool = Field(
        default=False,
        description="the cluster shape: 3 Kafka brokers (RF 3, min ISR 2), 2 Connect workers, "
        "a Spark standalone master with 2 workers, 2 replicas of each service",
    )
    kafka_brokers: int = Field(
        default=1,
        ge=1,
        description="embedded Kafka nodes (broker + controller each): 1, or 3 and more for a "
        "quorum with replication factor 3 and min.insync.replicas 2",
    )
    connect_workers: int = Field(
        default=1, ge=1, description="embedded Kafka Connect workers in one group"
    )
    spark_workers: int = Field(
        default=0,
        ge=0,
        description="workers of an embedded Spark standalone cluster (1 core each) the consumer "
        "drivers submit to; 0: Spark runs inside each driver (local[2])",
    )
    spark_master: str | None = Field(
        default=None, description="URL of an external Spark master (spark://host:port)"
    )
    service_replicas: int = Field(
        default=1, ge=1, description="processes of each saga service, each on its own port"
    )

    @model_validator(mode="after")
    def _cluster_shape(self) -> StackSettings:
        if self.cluster:
            shape = {
                "kafka_brokers": 3,
                "connect_workers": 2,
                "spark_workers": 2,
                "service_replicas": 2,
            }
            for name, size in shape.items():
                if name not in self.model_fields_set:
                    object.__setattr__(self, name, size)
        if self.kafka_brokers == 2:
            raise ValueError(
                "kafka_brokers=2: a KRaft quorum of two survives no loss; use 1, or 3 and more"
            )
        return self

    @model_validator(mode="after")
    def _message_mode_needs_a_prefix(self) -> StackSettings:
        if self.outbox_mode == "message" and self.message_prefix is None:
            raise ValueError(
                "outbox_mode 'message' needs a message_prefix: without one the connectors "
                "capture no message and every event would be lost"
            )
        return self

    @field_validator("message_prefix")
    @classmethod
    def _no_empty_prefix(cls, value: str | None) -> str | None:
        return value or None  # OUTBOXKIT_MESSAGE_PREFIX= (empty): capture no messages

    @field_validator("cdc_role")
    @classmethod
    def _role_identifier(cls, value: str) -> str:
        return postgres_identifier(value)
