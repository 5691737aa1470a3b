"""Where the pipeline's services are: the settings (environment ``OUTBOXKIT_``) that name the
database CDC reads, the Kafka cluster it writes to, the Connect cluster it runs on and the
connector, slot and publication; and `resolve`, which turns them into clients, asking a
fallback (the operator commands': the local dev stack's state file) only for what they leave
unset. The dev stack's settings and the operator commands' settings both start from these;
neither depends on the other.

In production the settings give every endpoint and nothing falls back; on a laptop the settings
are empty and the fallback gives them all; a mix (an external Kafka, an embedded database)
takes each from where it is."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy import Engine
from sqlalchemy.engine import URL

from cdc.config import DEFAULT_PUBLICATION_NAME, DEFAULT_SLOT_NAME
from cdc.connect import ConnectClient
from outboxkit.kernel.engines import database_url_setting, engine_for
from outboxkit.kernel.kafka.security import KafkaSecurity, KafkaSecuritySettings, client_config
from outboxkit.kernel.secrets import read_secret, setting_name, url_with_password

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
        description="SQLAlchemy URL of an external Postgres (postgresql+psycopg://; "
        "postgresql:// and postgres:// mean the same), as a role that may create roles and "
        "databases (set-up) or read the inbox tables (operator commands); no password in it",
        examples=["postgresql+psycopg://shop@db.internal:5432/shop"],
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
        if self.connect_password_file is None:
            return (self.connect_user, "")
        variable = setting_name(self, "connect_password_file")
        return (self.connect_user, read_secret(self.connect_password_file, variable))

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: str | None) -> str | None:
        return database_url_setting(value)  # OUTBOXKIT_DATABASE_URL= (empty): unset

    @field_validator("slot_name", "publication_name")
    @classmethod
    def _postgres_identifier(cls, value: str) -> str:
        return postgres_identifier(value)


class EndpointError(LookupError):
    """An endpoint the command needs is neither in the settings nor given by the fallback."""


@dataclass(frozen=True)
class Recorded:
    """What a fallback knows of the endpoints (None where it knows nothing).

    Attributes:
        origin: Where it read them, named in `Endpoints.source` (a state file's path).
        database: The database's URL.
        bootstrap_servers: The Kafka cluster's bootstrap servers.
        connect_url: The Connect cluster's REST URL.
    """

    origin: str
    database: URL | None = None
    bootstrap_servers: str | None = None
    connect_url: str | None = None


# Asked once per resolution, with the settings (e.g. for their stack_dir); None: nothing known.
Fallback = Callable[[EndpointSettings], Recorded | None]


@dataclass(frozen=True)
class Endpoints:
    """The resolved endpoints; ``None`` where neither source gives one. ``source`` names where
    each came from ("settings" or the fallback's origin)."""

    database: URL | None
    bootstrap_servers: str | None
    connect_url: str | None
    kafka_security: KafkaSecurity
    connect_auth: tuple[str, str] | None = field(default=None, repr=False)
    source: dict[str, str] = field(default_factory=dict)

    def database_url(self, override: str | None = None) -> str | URL:
        """The database to use: ``override`` (a command's --url), else the resolved one."""
        if override:
            return override
        if self.database is None:
            raise EndpointError(
                "no database: set OUTBOXKIT_DATABASE_URL (and OUTBOXKIT_DATABASE_PASSWORD_FILE), "
                "or pass --url (in outboxkit's repository: or start the local stack)"
            )
        return self.database

    def engine(self, override: str | None = None, **options: Any) -> Engine:
        """An engine on `database_url` (its password, if any, never in a log: URL masks it)."""
        return engine_for(self.database_url(override), "once", **options)

    def kafka(self) -> dict[str, str]:
        """A confluent-kafka client's bootstrap servers and security."""
        if self.bootstrap_servers is None:
            raise EndpointError(
                "no Kafka: set OUTBOXKIT_KAFKA_BOOTSTRAP_SERVERS (in outboxkit's repository: or "
                "start the local stack)"
            )
        return client_config(self.bootstrap_servers, self.kafka_security)

    def connect(self, *, timeout: float = 30) -> ConnectClient:
        """A client for the Connect cluster's REST API."""
        if self.connect_url is None:
            raise EndpointError(
                "no Kafka Connect: set OUTBOXKIT_CONNECT_URL (in outboxkit's repository: or start "
                "the local stack)"
            )
        return ConnectClient(self.connect_url, timeout=timeout, auth=self.connect_auth)


def resolve(settings: EndpointSettings, fallback: Fallback | None = None) -> Endpoints:
    """Each endpoint from ``settings``, else from ``fallback``, else None."""
    recorded = fallback(settings) if fallback is not None else None
    source: dict[str, str] = {}

    def pick(name: str, configured: Any, from_fallback: Any) -> Any:
        if configured:
            source[name] = "settings"
            return configured
        if recorded is not None and from_fallback:
            source[name] = recorded.origin
            return from_fallback
        return None

    configured_database = settings.database_url and url_with_password(
        settings.database_url,
        settings.database_password_file,
        setting_name(settings, "database_password_file"),
    )
    known = recorded or Recorded(origin="")
    database = pick("database", configured_database, known.database)
    bootstrap = pick("kafka", settings.kafka_bootstrap_servers, known.bootstrap_servers)
    connect = pick("connect", settings.connect_url, known.connect_url)
    security = settings.kafka_security
    if source.get("kafka", "settings") != "settings" and security.security_protocol != "PLAINTEXT":
        raise EndpointError(
            f"OUTBOXKIT_KAFKA_SECURITY_PROTOCOL={security.security_protocol} is set, but Kafka is "
            "the local stack's (PLAINTEXT): set OUTBOXKIT_KAFKA_BOOTSTRAP_SERVERS too"
        )
    return Endpoints(
        database=database,
        bootstrap_servers=bootstrap,
        connect_url=connect,
        kafka_security=security.resolve(),
        connect_auth=settings.connect_auth(),
        source=source,
    )
