"""How Kafka clients connect (SASL/TLS): one settings object read from ``OUTBOXKIT_KAFKA_*``,
and pure builders rendering it for librdkafka (confluent-kafka), Java clients (Spark's Kafka
source) and Kafka Connect workers. The password comes from a file and never shows in a repr."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from outboxkit.kernel.secrets import SecretError, read_secret, setting_name

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]

LOGIN_MODULES: dict[str, str] = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
# A Connect worker's own clients read the top-level names; its connectors' clients the prefixed.
CONNECT_CLIENT_PREFIXES = ("", "producer.", "consumer.", "admin.")


class KafkaSecurityError(ValueError):
    """The Kafka security settings contradict each other or their password file is unreadable."""


@dataclass(frozen=True)
class SaslLogin:
    """A SASL user; the password is left out of repr and str."""

    mechanism: SaslMechanism
    username: str
    password: str = field(repr=False)


@dataclass(frozen=True)
class KafkaSecurity:
    """A client's security protocol, its SASL login (SASL_* only) and the PEM CA of its TLS."""

    protocol: SecurityProtocol = "PLAINTEXT"
    sasl: SaslLogin | None = None
    ca_location: Path | None = None

    def __post_init__(self) -> None:
        if self.protocol.startswith("SASL_") != (self.sasl is not None):
            raise KafkaSecurityError(f"{self.protocol} needs a SASL login exactly when SASL_*")
        if self.ca_location is not None and not self.protocol.endswith("SSL"):
            raise KafkaSecurityError(
                f"a CA location needs TLS (SSL or SASL_SSL), not {self.protocol}"
            )


PLAINTEXT = KafkaSecurity()


def librdkafka_config(security: KafkaSecurity) -> dict[str, str]:
    """The security properties of a confluent-kafka client (empty for PLAINTEXT)."""
    if security.protocol == "PLAINTEXT":
        return {}
    config: dict[str, str] = {"security.protocol": security.protocol}
    if security.sasl is not None:
        config["sasl.mechanism"] = security.sasl.mechanism
        config["sasl.username"] = security.sasl.username
        config["sasl.password"] = security.sasl.password
    if security.ca_location is not None:
        config["ssl.ca.location"] = str(security.ca_location)
    return config


# librdkafka logs each failed attempt to reach each broker, several lines a second while a cluster
# is down (thousands in an outage, interleaved with a command's answer). The framework reports a
# failure itself, once, from the error the call returns: only librdkafka's critical lines are
# kept (a job's own client options may set ``log_level`` or ``debug`` again).
QUIET_LOGS = {"log_level": "2"}


def client_config(
    bootstrap: str, security: KafkaSecurity, options: Mapping[str, str] | None = None
) -> dict[str, str]:
    """A confluent-kafka client's settings: the servers, the security, quiet logs, then
    ``options`` (a job's own client options), which win."""
    return {
        "bootstrap.servers": bootstrap,
        **QUIET_LOGS,
        **librdkafka_config(security),
        **(options or {}),
    }


def jaas_config(login: SaslLogin) -> str:
    """``sasl.jaas.config`` of a Java client: the mechanism's LoginModule with quoted options."""
    return (
        f"{LOGIN_MODULES[login.mechanism]} required "
        f"username={jaas_quoted(login.username)} password={jaas_quoted(login.password)};"
    )


def jaas_quoted(value: str) -> str:
    """``value`` as a quoted JAAS option value."""
    # Kafka parses JAAS with java.io.StreamTokenizer: inside quotes a backslash escapes the next
    # character, and a bare line break ends the string.
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + escaped.replace("\n", "\\n").replace("\r", "\\r") + '"'


def java_client_config(security: KafkaSecurity) -> dict[str, str]:
    """The security properties of a Java Kafka client (empty for PLAINTEXT)."""
    if security.protocol == "PLAINTEXT":
        return {}
    config: dict[str, str] = {"security.protocol": security.protocol}
    if security.sasl is not None:
        config["sasl.mechanism"] = security.sasl.mechanism
        config["sasl.jaas.config"] = jaas_config(security.sasl)
    if security.ca_location is not None:
        config["ssl.truststore.type"] = "PEM"
        config["ssl.truststore.location"] = str(security.ca_location)
    return config


def spark_source_options(security: KafkaSecurity) -> dict[str, str]:
    """Options of Spark's Kafka source: the Java client's properties prefixed ``kafka.``."""
    return {f"kafka.{k}": v for k, v in java_client_config(security).items()}


def connect_worker_config(security: KafkaSecurity) -> dict[str, str]:
    """Properties of a Kafka Connect worker: for its own clients and its connectors'."""
    client = java_client_config(security)
    return {f"{prefix}{k}": v for prefix in CONNECT_CLIENT_PREFIXES for k, v in client.items()}


class KafkaSecuritySettings(BaseSettings):
    """``OUTBOXKIT_KAFKA_SECURITY_PROTOCOL``, ``_SASL_MECHANISM``, ``_SASL_USERNAME``,
    ``_SASL_PASSWORD_FILE`` and ``_SSL_CA_LOCATION``; `resolve` reads the password file."""

    model_config = SettingsConfigDict(
        env_prefix="OUTBOXKIT_KAFKA_", env_file=".env", extra="ignore", frozen=True
    )

    security_protocol: SecurityProtocol = Field(
        default="PLAINTEXT",
        description="how clients reach the brokers: plain or TLS, with or without SASL",
    )
    sasl_mechanism: SaslMechanism | None = Field(
        default=None, description="the SASL mechanism (SASL_PLAINTEXT and SASL_SSL need one)"
    )
    sasl_username: str | None = Field(default=None, description="the SASL user")
    sasl_password_file: Path | None = Field(
        default=None, description="file holding the SASL user's password (a mounted secret)"
    )
    ssl_ca_location: Path | None = Field(
        default=None,
        description="PEM file of the CA that signed the brokers' certificates (SSL, SASL_SSL); "
        "unset: the system's trust store",
    )

    @model_validator(mode="after")
    def _consistent(self) -> KafkaSecuritySettings:
        sasl = {
            "OUTBOXKIT_KAFKA_SASL_MECHANISM": self.sasl_mechanism,
            "OUTBOXKIT_KAFKA_SASL_USERNAME": self.sasl_username,
            "OUTBOXKIT_KAFKA_SASL_PASSWORD_FILE": self.sasl_password_file,
        }
        if self.security_protocol.startswith("SASL_"):
            missing = [name for name, value in sasl.items() if value is None]
            if missing:
                raise KafkaSecurityError(f"{self.security_protocol} needs {', '.join(missing)}")
        elif given := [name for name, value in sasl.items() if value is not None]:
            raise KafkaSecurityError(
                f"{', '.join(given)} set, but OUTBOXKIT_KAFKA_SECURITY_PROTOCOL is "
                f"{self.security_protocol}: use SASL_PLAINTEXT or SASL_SSL"
            )
        if self.ssl_ca_location is not None and not self.security_protocol.endswith("SSL"):
            raise KafkaSecurityError(
                f"OUTBOXKIT_KAFKA_SSL_CA_LOCATION set, but the protocol is "
                f"{self.security_protocol}: use SSL or SASL_SSL"
            )
        return self

    def resolve(self) -> KafkaSecurity:
        """The security these settings describe, with the password read from its file."""
        login = None
        if self.sasl_mechanism and self.sasl_username and self.sasl_password_file:
            variable = setting_name(self, "sasl_password_file")
            try:
                password = read_secret(self.sasl_password_file, variable)
            except SecretError as exc:
                raise KafkaSecurityError(str(exc)) from exc
            login = SaslLogin(self.sasl_mechanism, self.sasl_username, password)
        return KafkaSecurity(self.security_protocol, login, self.ssl_ca_location)
