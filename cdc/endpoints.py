"""Where the pipeline's services are, as settings (environment ``OUTBOXKIT_``): the database CDC
reads, the Kafka cluster it writes to, the Connect cluster it runs on, and the names of the
connector, slot and publication. The local dev stack's settings and the operator commands'
settings both start from these; neither depends on the other."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from cdc.config import DEFAULT_PUBLICATION_NAME, DEFAULT_SLOT_NAME
from kernel.kafka.security import KafkaSecuritySettings
from kernel.secrets import read_secret

DEFAULT_CONNECTOR_NAME = "outboxkit-outbox"


def postgres_identifier(value: str) -> str:
    """``value`` when it is a plain lower-case Postgres identifier; ValueError otherwise."""
    if not value.replace("_", "").isalnum() or not value.islower() or len(value) > 63:
        raise ValueError(f"{value!r}: use lower-case letters, digits and underscores (at most 63)")
    return value


class EndpointSettings(BaseSettings):
    """The pipeline's endpoints. A URL left unset means "the local stack's": the dev stack
    starts that component, and an operator command reads its address from the stack's state
    file (``stack_dir``)."""

    model_config = SettingsConfigDict(env_prefix="OUTBOXKIT_", env_file=".env", extra="ignore")

    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL of an external Postgres (postgresql+psycopg://), as a role "
        "that may create roles and databases (set-up) or read the inbox tables (operator "
        "commands); no password in it",
    )
    database_password_file: Path | None = Field(
        default=None, description="file holding database_url's password (a mounted secret)"
    )
    kafka_bootstrap_servers: str | None = Field(
        default=None, description="bootstrap servers of an external Kafka cluster"
    )
    kafka_security: KafkaSecuritySettings = Field(
        default_factory=KafkaSecuritySettings,
        description="SASL/TLS of the external Kafka cluster (OUTBOXKIT_KAFKA_SECURITY_PROTOCOL...)",
    )
    connect_url: str | None = Field(
        default=None, description="REST URL of an external Kafka Connect cluster"
    )
    connect_user: str | None = Field(
        default=None, description="basic authentication user of Connect's REST API"
    )
    connect_password_file: Path | None = Field(
        default=None, description="file holding connect_user's password (a mounted secret)"
    )
    stack_dir: Path = Field(
        default=Path(".outboxkit/stack"),
        description="the local dev stack's directory; its state file gives the endpoints the "
        "settings leave unset",
    )
    connector_name: str = Field(
        default=DEFAULT_CONNECTOR_NAME, description="the outbox connector's name in Connect"
    )
    slot_name: str = Field(
        default=DEFAULT_SLOT_NAME, description="the connector's replication slot"
    )
    publication_name: str = Field(
        default=DEFAULT_PUBLICATION_NAME, description="the connector's publication"
    )

    def connect_auth(self) -> tuple[str, str] | None:
        """Basic authentication for Connect's REST API (user, password from its file), or None."""
        if not self.connect_user:
            return None
        password = read_secret(self.connect_password_file) if self.connect_password_file else ""
        return (self.connect_user, password)

    @field_validator("slot_name", "publication_name")
    @classmethod
    def _postgres_identifier(cls, value: str) -> str:
        return postgres_identifier(value)
