"""An embedded Kafka Connect distributed worker running Debezium."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from cdc.connect import ConnectClient
from cdc.limits import WORKER_SETTINGS
from devstack.processes import java_properties, log4j2_properties, start, stop, wait_until

# Connect's config provider for secrets: ${dir:<directory>:<file>} in a connector config is that
# file's content, resolved inside the worker (KIP-297/KIP-632), so the REST API, the config topic
# and the logs only ever hold the reference.
SECRETS_PROVIDER = "dir"
DIRECTORY_CONFIG_PROVIDER = "org.apache.kafka.common.config.provider.DirectoryConfigProvider"
LOG4J2 = log4j2_properties("INFO", {"org.apache.kafka.clients": "WARN", "org.reflections": "ERROR"})


def worker_properties(
    bootstrap: str,
    rest_port: int,
    *,
    exactly_once: bool,
    group: str = "outboxkit-connect",
    secrets_dir: Path | None = None,
    kafka_security: Mapping[str, str] | None = None,
) -> str:
    """Worker config tuned for one small local worker on a single-node broker; with
    ``kafka_security`` (outbox.kafka_security.connect_worker_config) for a SASL/TLS cluster."""
    settings = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "listeners": f"http://127.0.0.1:{rest_port}",
        "rest.advertised.host.name": "127.0.0.1",
        "rest.advertised.port": str(rest_port),
        "plugin.discovery": "service_load",
        "key.converter": "org.apache.kafka.connect.json.JsonConverter",
        "key.converter.schemas.enable": "false",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "false",
        "config.storage.topic": f"_{group}-configs",
        "offset.storage.topic": f"_{group}-offsets",
        "status.storage.topic": f"_{group}-status",
        "config.storage.replication.factor": "1",
        "offset.storage.replication.factor": "1",
        "status.storage.replication.factor": "1",
        "offset.storage.partitions": "1",
        "status.storage.partitions": "1",
        "offset.flush.interval.ms": "1000",
        "scheduled.rebalance.max.delay.ms": "0",
        "session.timeout.ms": "10000",
        "heartbeat.interval.ms": "3000",
        "enable.metrics.push": "false",
        "producer.enable.metrics.push": "false",
        "consumer.enable.metrics.push": "false",
        "admin.enable.metrics.push": "false",
        # Kafka's default producer record size limit and override policy (cdc.limits).
        **WORKER_SETTINGS,
        # KIP-618: each source task's records and its source offsets commit in one Kafka
        # transaction, so a worker crash re-sends nothing a read_committed consumer can see.
        "exactly.once.source.support": "enabled" if exactly_once else "disabled",
    }
    if secrets_dir is not None:
        settings.update(
            {
                "config.providers": SECRETS_PROVIDER,
                f"config.providers.{SECRETS_PROVIDER}.class": DIRECTORY_CONFIG_PROVIDER,
                # KIP-993: the provider reads this directory and nothing else.
                f"config.providers.{SECRETS_PROVIDER}.param.allowed.paths": str(secrets_dir),
            }
        )
    settings.update(kafka_security or {})
    return java_properties(settings)


def start_worker(
    java: Path,
    libs: Path,
    bootstrap: str,
    rest_port: int,
    workdir: Path,
    log: Path,
    *,
    exactly_once: bool = True,
    group: str = "outboxkit-connect",
    secrets_dir: Path | None = None,
    kafka_security: Mapping[str, str] | None = None,
) -> int:
    """Start the worker and wait until its REST API answers; return its PID."""
    workdir.mkdir(parents=True, exist_ok=True)
    props = workdir / "worker.properties"
    props.touch()
    props.chmod(0o600)  # it may carry the Kafka cluster's SASL password
    props.write_text(
        worker_properties(
            bootstrap,
            rest_port,
            exactly_once=exactly_once,
            group=group,
            secrets_dir=secrets_dir,
            kafka_security=kafka_security,
        )
    )
    log4j = workdir / "log4j2.properties"
    log4j.write_text(LOG4J2)
    argv = [
        str(java),
        "-Xms128m",
        "-Xmx512m",
        "-XX:+UseSerialGC",
        f"-Dlog4j2.configurationFile={log4j}",
        "-cp",
        f"{libs}/*",
        "org.apache.kafka.connect.cli.ConnectDistributed",
        str(props),
    ]
    pid = start("connect", argv, log=log, cwd=workdir)
    client = ConnectClient(f"http://127.0.0.1:{rest_port}", timeout=5)
    # Started means the herder is ready (/health), not only the REST server (see ready()).
    try:
        wait_until("kafka connect", client.ready, timeout=240, pid=pid, log=log, poll=0.5)
    except BaseException:
        stop(pid)  # never recorded in the state file: `stack down` could not stop it
        raise
    return pid
