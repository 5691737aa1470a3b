"""Where each stack component lives and how the outbox is relayed (environment ``OUTBOXKIT_``)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from cdc.settings import CdcSettings
from outbox.publish import OutboxMode


def default_cache_dir() -> Path:
    """Where downloaded jars and distributions are kept (``~/.cache/outboxkit``)."""
    return Path.home() / ".cache" / "outboxkit"


class StackSettings(CdcSettings):
    """The local dev stack: which components it starts (those whose endpoint is unset), their
    shape, and how the outbox is relayed (the connector's settings are `cdc.settings.CdcSettings`'s,
    which an operator's `outboxkit cdc apply` reads too)."""

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
    cache_dir: Path = Field(
        default_factory=default_cache_dir,
        description="where downloaded jars and distributions are kept (~/.cache/outboxkit)",
    )
    database_name: str = Field(
        default="outboxkit", description="the outbox's database, when database_url names none"
    )

    # The connectors capture logical decoding messages with message_prefix whatever the mode.
    outbox_mode: OutboxMode = Field(
        default="delete",
        description="how the saga's services (and their consumers) write events: delete, "
        "retain or message",
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
    network: Literal["loopback", "namespaces"] = Field(
        default="loopback",
        description="where the embedded nodes run: all on loopback, or 'namespaces': each "
        "node (Postgres, each broker, Connect worker, Spark node, service replica and the "
        "consumer driver) in a network namespace of its own, on a bridge whose links can be "
        "cut, slowed and made lossy (`outboxkit dev chaos` partition kinds; needs root)",
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
