"""A second embedded broker with a SASL_PLAINTEXT listener (PLAIN): a confluent-kafka client
with the built settings produces and consumes; one without them is refused."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from outboxkit.kernel.kafka.security import (
    LOGIN_MODULES,
    KafkaSecurity,
    KafkaSecuritySettings,
    jaas_quoted,
    librdkafka_config,
)
from outboxkit_workshop.devstack import artifacts, broker
from outboxkit_workshop.devstack.processes import free_port, stop
from outboxkit_workshop.devstack.settings import StackSettings

pytestmark = pytest.mark.integration

# Quotes and backslashes: the broker reads it through JAAS and .properties escaping, the client
# as is; a login only works when both escapings are right.
PASSWORD = 'al"ice\\pa\\"ss'


def broker_jaas(password: str) -> str:
    """The broker's PLAIN login module with one user, alice."""
    return (
        f"{LOGIN_MODULES['PLAIN']} required username={jaas_quoted('admin')} "
        f"password={jaas_quoted('admin-secret')} user_alice={jaas_quoted(password)};"
    )


@pytest.fixture(scope="module")
def sasl_broker() -> Iterator[str]:
    """A broker on free loopback ports; yields its SASL_PLAINTEXT bootstrap address."""
    found = artifacts.locate(StackSettings(_env_file=None).cache_dir)
    workdir = Path(tempfile.mkdtemp(prefix="outboxkit-sasl-"))
    port, sasl_port, controller = free_port(), free_port(), free_port()
    extra = {
        "listeners": f"PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl_port},"
        f"CONTROLLER://127.0.0.1:{controller}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port},"
        f"SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,"
        "CONTROLLER:PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": broker_jaas(PASSWORD),
    }
    pid = broker.start_broker(
        found.java,
        found.broker_libs,
        workdir / "kafka",
        port,
        controller,
        workdir / "broker.log",
        extra=extra,
    )
    try:
        yield f"127.0.0.1:{sasl_port}"
    finally:
        stop(pid)
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def security(tmp_path: Path) -> KafkaSecurity:
    secret = tmp_path / "kafka.password"
    secret.write_text(PASSWORD + "\n")
    return KafkaSecuritySettings(
        _env_file=None,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_username="alice",
        sasl_password_file=secret,
    ).resolve()


def test_a_client_with_the_settings_produces_and_consumes(sasl_broker, security):
    topic = f"sasl-{uuid.uuid4().hex[:8]}"
    config = {"bootstrap.servers": sasl_broker, **librdkafka_config(security)}
    producer = Producer({**config, "enable.idempotence": True})
    for n in range(5):
        producer.produce(topic, key=b"k", value=str(n).encode())
    assert producer.flush(30) == 0
    consumer = Consumer(
        {**config, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"},
    )
    consumer.subscribe([topic])
    seen: list[bytes] = []
    try:
        for _ in range(60):
            message = consumer.poll(1)
            if message is not None and message.error() is None:
                seen.append(message.value())
            if len(seen) == 5:
                break
    finally:
        consumer.close()
    assert seen == [str(n).encode() for n in range(5)]


def test_a_client_without_them_is_refused(sasl_broker):
    admin = AdminClient({"bootstrap.servers": sasl_broker, "socket.timeout.ms": 2000})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)


def test_a_wrong_password_is_refused(sasl_broker, security):
    assert security.sasl is not None
    wrong = {**librdkafka_config(security), "sasl.password": security.sasl.password + "x"}
    admin = AdminClient({"bootstrap.servers": sasl_broker, **wrong})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)
