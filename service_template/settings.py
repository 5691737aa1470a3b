"""The one settings object of a service. Subclass it with your own env prefix."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy.engine import URL

from outbox.settings import OutboxSettings
from outboxkit.kernel.engines import database_url
from outboxkit.kernel.kafka.security import KafkaSecuritySettings
from outboxkit.kernel.secrets import setting_name, url_with_password


class ServiceSettings(BaseSettings):
    """Where the service's database is, and what its metrics report on.

    A service subclasses it: ``class OrdersSettings(ServiceSettings): model_config =
    SettingsConfigDict(env_prefix="ORDERS_")`` reads ``ORDERS_DATABASE_URL`` and so on."""

    model_config = SettingsConfigDict(
        env_prefix="SERVICE_", env_nested_delimiter="__", extra="ignore"
    )

    name: str = Field(default="service", description="service name, in logs and metrics")
    database_url: str = Field(
        description="SQLAlchemy URL of the service's own database, without its password "
        "(postgresql+psycopg://; postgresql:// and postgres:// mean the same)",
        examples=["postgresql+psycopg://app@db.internal:5432/app"],
    )
    database_password_file: Path | None = Field(
        default=None, description="file holding the database password (a mounted secret)"
    )
    kafka_bootstrap_servers: str | None = Field(
        default=None, description="for the inbox-lag metric (end offsets); unset: no lag metric"
    )
    kafka_security: KafkaSecuritySettings = Field(
        default_factory=KafkaSecuritySettings,
        description="SASL/TLS of the Kafka clients, read from OUTBOXKIT_KAFKA_* (one for all "
        "services of a cluster)",
    )
    consumers: list[str] = Field(
        default_factory=list,
        description="inbox consumer names whose lag and parked count to export",
    )
    outbox: OutboxSettings = Field(
        default_factory=OutboxSettings,
        description="how the service writes events (e.g. ORDERS_OUTBOX__MODE=retain)",
    )
    api_docs: bool = Field(
        default=False,
        description="serve the API's documentation: /docs and /openapi.json (off by default: "
        "they describe every route to whoever reaches the service)",
    )
    metrics_token_file: Path | None = Field(
        default=None,
        description="file holding the bearer token /metrics asks of a scraper (a mounted "
        "secret); unset: /metrics answers anyone who reaches it",
        examples=["/run/secrets/metrics.token"],
    )
    max_request_bytes: int = Field(
        default=64 * 1024,
        gt=0,
        description="largest request body accepted, declared or streamed; larger is a 413 "
        "(e.g. ORDERS_MAX_REQUEST_BYTES)",
    )
    pool_size: int = Field(default=10, description="connections in the database engine's pool")
    pool_overflow: int = Field(
        default=0,
        ge=0,
        description="connections opened beyond pool_size under a burst, closed when given back "
        "while pool_size are idle (each a new login: 0 keeps the pool at pool_size)",
    )
    pool_ping: bool = Field(
        default=True,
        description="ping a connection when it is taken from the pool (one round trip per "
        "request; false: a connection a database restart killed fails its request with 503)",
    )
    log_level: str = Field(default="INFO", description="the logging level (DEBUG, INFO, ...)")
    log_json: bool = Field(
        default=True, description="logs as one JSON object a line (false: plain text)"
    )

    def engine_url(self) -> URL:
        """The database URL with its password from ``database_password_file`` (masked when
        printed)."""
        variable = setting_name(self, "database_password_file")
        return url_with_password(self.database_url, self.database_password_file, variable)

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: str) -> str:
        return database_url(value).render_as_string(hide_password=False)
