"""The Kafka security settings and their renderings for librdkafka, Java clients and Connect."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from pydantic import ValidationError

from outboxkit.kernel.kafka.security import (
    PLAINTEXT,
    KafkaSecurity,
    KafkaSecurityError,
    KafkaSecuritySettings,
    SaslLogin,
    connect_worker_config,
    jaas_config,
    java_client_config,
    librdkafka_config,
    spark_source_options,
)
from outboxkit_workshop.devstack.connect import worker_properties
from outboxkit_workshop.devstack.processes import java_properties
from spark_consumers.job import Job

PASSWORD = 'pa"ss\\word'  # a quote and a backslash: both need escaping in JAAS
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
ENV = (
    "SECURITY_PROTOCOL",
    "SASL_MECHANISM",
    "SASL_USERNAME",
    "SASL_PASSWORD_FILE",
    "SSL_CA_LOCATION",
)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch, tmp_path):
    for name in ENV:
        monkeypatch.delenv(f"OUTBOXKIT_KAFKA_{name}", raising=False)
    monkeypatch.chdir(tmp_path)  # no .env of the repository


@pytest.fixture
def password_file(tmp_path: Path) -> Path:
    path = tmp_path / "kafka.password"
    path.write_text(PASSWORD + "\n")  # as a mounted secret often ends
    return path


def sasl(protocol: str = "SASL_PLAINTEXT", mechanism: str = "PLAIN", **kw) -> KafkaSecurity:
    return KafkaSecurity(protocol, SaslLogin(mechanism, "alice", PASSWORD), **kw)  # type: ignore[arg-type]


def test_plaintext_adds_nothing():
    assert librdkafka_config(PLAINTEXT) == {}
    assert java_client_config(PLAINTEXT) == {}
    assert spark_source_options(PLAINTEXT) == {}
    assert connect_worker_config(PLAINTEXT) == {}
    assert KafkaSecuritySettings().resolve() == PLAINTEXT


def test_ssl_trusts_the_pem_ca():
    security = KafkaSecurity("SSL", ca_location=Path("/certs/ca.pem"))
    assert librdkafka_config(security) == {
        "security.protocol": "SSL",
        "ssl.ca.location": "/certs/ca.pem",
    }
    assert java_client_config(security) == {
        "security.protocol": "SSL",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": "/certs/ca.pem",
    }


def test_sasl_plaintext_plain():
    security = sasl()
    assert librdkafka_config(security) == {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "alice",
        "sasl.password": PASSWORD,  # librdkafka takes it as is
    }
    java = java_client_config(security)
    assert java["security.protocol"] == "SASL_PLAINTEXT"
    assert java["sasl.mechanism"] == "PLAIN"
    assert java["sasl.jaas.config"].startswith(f"{PLAIN_MODULE} required ")
    assert "ssl.truststore.location" not in java


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_ssl_scram(mechanism):
    security = sasl("SASL_SSL", mechanism, ca_location=Path("/certs/ca.pem"))
    rd = librdkafka_config(security)
    assert rd["security.protocol"] == "SASL_SSL"
    assert rd["sasl.mechanism"] == mechanism
    assert rd["ssl.ca.location"] == "/certs/ca.pem"
    java = java_client_config(security)
    assert java["sasl.mechanism"] == mechanism
    assert java["sasl.jaas.config"].startswith(f"{SCRAM_MODULE} required ")
    assert java["ssl.truststore.type"] == "PEM"
    assert java["ssl.truststore.location"] == "/certs/ca.pem"


def _stream_tokenizer_unquote(quoted: str) -> str:
    """What java.io.StreamTokenizer (Kafka's JAAS parser) reads from a quoted string."""
    assert quoted[0] == quoted[-1] == '"'
    out, chars = [], iter(quoted[1:-1])
    escapes = {"n": "\n", "r": "\r", "t": "\t"}
    for c in chars:
        if c == "\\":
            nxt = next(chars)
            out.append(escapes.get(nxt, nxt))
        else:
            assert c != '"', "an unescaped quote ends the string early"
            out.append(c)
    return "".join(out)


@pytest.mark.parametrize("password", [PASSWORD, '"', "\\", '\\"', 'a"b"c\\\\d', "line\nbreak"])
def test_jaas_quotes_every_password_so_kafka_reads_it_back(password):
    text = jaas_config(SaslLogin("PLAIN", 'al"ice', password))
    assert text.endswith(";")
    body = text.removeprefix(f"{PLAIN_MODULE} required ").removesuffix(";")
    user, _, secret = body.partition(" password=")
    assert _stream_tokenizer_unquote(user.removeprefix("username=")) == 'al"ice'
    assert _stream_tokenizer_unquote(secret) == password


def test_jaas_of_the_shared_example():
    assert jaas_config(SaslLogin("SCRAM-SHA-512", "alice", PASSWORD)) == (
        f'{SCRAM_MODULE} required username="alice" password="pa\\"ss\\\\word";'
    )


def test_spark_options_and_connect_worker_prefixes():
    java = java_client_config(sasl())
    assert spark_source_options(sasl()) == {f"kafka.{k}": v for k, v in java.items()}
    worker = connect_worker_config(sasl())
    for prefix in ("", "producer.", "consumer.", "admin."):
        assert {k: worker[prefix + k] for k in java} == java
    assert len(worker) == 4 * len(java)


def test_settings_read_the_environment_and_the_password_file(monkeypatch, password_file):
    monkeypatch.setenv("OUTBOXKIT_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("OUTBOXKIT_KAFKA_SASL_MECHANISM", "SCRAM-SHA-256")
    monkeypatch.setenv("OUTBOXKIT_KAFKA_SASL_USERNAME", "alice")
    monkeypatch.setenv("OUTBOXKIT_KAFKA_SASL_PASSWORD_FILE", str(password_file))
    monkeypatch.setenv("OUTBOXKIT_KAFKA_SSL_CA_LOCATION", "/certs/ca.pem")
    monkeypatch.setenv("OUTBOXKIT_KAFKA_BOOTSTRAP_SERVERS", "kafka:9093")  # another setting's
    assert KafkaSecuritySettings().resolve() == sasl(
        "SASL_SSL", "SCRAM-SHA-256", ca_location=Path("/certs/ca.pem")
    )


def test_the_stack_and_service_settings_carry_them(monkeypatch):
    from outboxkit.settings import Settings
    from service_template.settings import ServiceSettings

    monkeypatch.setenv("OUTBOXKIT_KAFKA_SECURITY_PROTOCOL", "SSL")
    assert Settings(_env_file=None).kafka_security.security_protocol == "SSL"
    service = ServiceSettings(database_url="postgresql+psycopg://x/y")
    assert service.kafka_security.security_protocol == "SSL"


def test_no_password_in_str_repr_or_logs(tmp_path, caplog):
    password_file = tmp_path / "kafka.password"
    password_file.write_text("s3cr3t-Zq9")
    settings = KafkaSecuritySettings(
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_username="alice",
        sasl_password_file=password_file,
    )
    security = settings.resolve()
    assert security.sasl is not None and security.sasl.password == "s3cr3t-Zq9"
    job = Job("j", ("t",), "c", {}, "postgresql://x/y", "kafka:9092", kafka_security=security)
    with caplog.at_level(logging.INFO):
        logging.getLogger("test").info("settings %s security %r job %s", settings, security, job)
    shown = [str(settings), repr(settings), str(security), repr(security), repr(job), caplog.text]
    for text in shown:
        assert "alice" in text
        assert "s3cr3t" not in text


def test_a_missing_password_file_says_which_setting(tmp_path):
    settings = KafkaSecuritySettings(
        security_protocol="SASL_SSL",
        sasl_mechanism="PLAIN",
        sasl_username="alice",
        sasl_password_file=tmp_path / "absent",
    )
    with pytest.raises(KafkaSecurityError, match=r"OUTBOXKIT_KAFKA_SASL_PASSWORD_FILE.*absent"):
        settings.resolve()


def test_an_empty_password_file_is_refused(tmp_path):
    empty = tmp_path / "empty"
    empty.write_text("\n")
    settings = KafkaSecuritySettings(
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_username="alice",
        sasl_password_file=empty,
    )
    with pytest.raises(KafkaSecurityError, match="empty"):
        settings.resolve()


def test_sasl_needs_mechanism_user_and_password_file():
    with pytest.raises(ValidationError, match="OUTBOXKIT_KAFKA_SASL_PASSWORD_FILE"):
        KafkaSecuritySettings(
            security_protocol="SASL_SSL", sasl_mechanism="PLAIN", sasl_username="alice"
        )


def test_sasl_settings_without_a_sasl_protocol_are_refused(password_file):
    # Silently connecting without the login the operator configured would be worse.
    with pytest.raises(ValidationError, match="use SASL_PLAINTEXT or SASL_SSL"):
        KafkaSecuritySettings(sasl_username="alice", sasl_password_file=password_file)
    with pytest.raises(ValidationError, match="use SSL or SASL_SSL"):
        KafkaSecuritySettings(ssl_ca_location="/ca.pem")


@pytest.mark.parametrize("protocol", ["PLAIN", "sasl_ssl", "TLS"])
def test_unknown_protocols_and_mechanisms_are_refused(protocol):
    with pytest.raises(ValidationError):
        KafkaSecuritySettings(security_protocol=protocol)
    with pytest.raises(ValidationError):
        KafkaSecuritySettings(security_protocol="SASL_SSL", sasl_mechanism="GSSAPI")


def test_inconsistent_security_cannot_be_built():
    with pytest.raises(KafkaSecurityError):
        KafkaSecurity("SASL_SSL")
    with pytest.raises(KafkaSecurityError):
        KafkaSecurity("PLAINTEXT", SaslLogin("PLAIN", "alice", PASSWORD))
    with pytest.raises(KafkaSecurityError):
        KafkaSecurity("SASL_PLAINTEXT", sasl().sasl, ca_location=Path("/ca.pem"))


def test_java_properties_escape_backslashes_and_line_breaks():
    text = java_properties({"a": "x\\y", "b": "one\ntwo", "c": " lead", "d": "k=v:w"})
    assert text == "a=x\\\\y\nb=one\\ntwo\nc=\\ lead\nd=k=v:w\n"


def test_connect_worker_properties_carry_the_security():
    plain = worker_properties("kafka:9092", 8083, exactly_once=True)
    assert "security.protocol" not in plain and "sasl" not in plain
    text = worker_properties(
        "kafka:9092", 8083, exactly_once=True, kafka_security=connect_worker_config(sasl())
    )
    lines = dict(line.split("=", 1) for line in text.splitlines())
    assert lines["producer.security.protocol"] == "SASL_PLAINTEXT"
    # Properties escaping on top of JAAS escaping: \\ in the file reads as one backslash.
    assert lines["admin.sasl.jaas.config"].endswith('password="pa\\\\"ss\\\\\\\\word";')
