"""The one place an operator command finds what it talks to: the settings first, then the local
dev stack's state file (what `outboxkit stack up` recorded), never by building the dev stack.

In production the settings give every endpoint and no state file exists; on a laptop the settings
are empty and the state file gives them all; a mix (an external Kafka, an embedded database) takes
each from where it is."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.engine import URL, make_url

from cdc.connect import ConnectClient
from cdc.endpoints import EndpointSettings
from devstack.connect import live_url
from devstack.state import StackState
from kernel.engines import engine_for
from kernel.kafka.security import KafkaSecurity, librdkafka_config
from kernel.secrets import url_with_password
from outboxkit.settings import Settings


class EndpointError(LookupError):
    """An endpoint the command needs is neither in the settings nor in a state file."""


@dataclass(frozen=True)
class Endpoints:
    """The resolved endpoints; ``None`` where neither source gives one. ``source`` names where
    each came from ("settings" or the state file's path)."""

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
                "pass --url, or start the local stack (outboxkit stack up)"
            )
        return self.database

    def engine(self, override: str | None = None, **options: Any) -> Engine:
        """An engine on `database_url` (its password, if any, never in a log: URL masks it)."""
        return engine_for(self.database_url(override), "once", **options)

    def kafka(self) -> dict[str, str]:
        """A confluent-kafka client's bootstrap servers and security."""
        if self.bootstrap_servers is None:
            raise EndpointError(
                "no Kafka: set OUTBOXKIT_KAFKA_BOOTSTRAP_SERVERS, or start the local stack"
            )
        return {
            "bootstrap.servers": self.bootstrap_servers,
            **librdkafka_config(self.kafka_security),
        }

    def connect(self, *, timeout: float = 30) -> ConnectClient:
        """A client for the Connect cluster's REST API."""
        if self.connect_url is None:
            raise EndpointError(
                "no Kafka Connect: set OUTBOXKIT_CONNECT_URL, or start the local stack"
            )
        return ConnectClient(self.connect_url, timeout=timeout, auth=self.connect_auth)


def resolve(settings: EndpointSettings) -> Endpoints:
    """Each endpoint from ``settings``, else from the state file in ``settings.stack_dir``."""
    state_file = settings.stack_dir.resolve() / "state.json"
    recorded = StackState.load(state_file)
    source: dict[str, str] = {}

    def pick(name: str, configured: Any, from_state: Any) -> Any:
        if configured:
            source[name] = "settings"
            return configured
        if recorded is not None and from_state:
            source[name] = str(state_file)
            return from_state
        return None

    configured_database = settings.database_url and url_with_password(
        settings.database_url, settings.database_password_file
    )
    recorded_database = (
        recorded and recorded.postgres.endpoint and make_url(recorded.postgres.endpoint)
    )
    database = pick("database", configured_database, recorded_database)
    bootstrap = pick(
        "kafka", settings.kafka_bootstrap_servers, recorded and recorded.broker.endpoint
    )
    connect = pick("connect", settings.connect_url, recorded and live_url(recorded))
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


def spark_jars(settings: Settings) -> list[Path]:
    """The jars a consumer driver hands Spark: the settings', else the local stack's cache's
    (none when neither has them: the cluster's classpath or spark-submit provides them)."""
    if settings.spark_jars:
        return list(settings.spark_jars)
    from devstack.artifacts import cached_spark_jars
    from devstack.settings import default_cache_dir

    return cached_spark_jars(settings.cache_dir or default_cache_dir())
