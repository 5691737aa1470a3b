"""An embedded Kafka Connect distributed worker running Debezium."""

from __future__ import annotations

from pathlib import Path

from cdc.connect import ConnectClient
from cdc.limits import WORKER_SETTINGS
from devstack.processes import log4j2_properties, start, wait_until

LOG4J2 = log4j2_properties("INFO", {"org.apache.kafka.clients": "WARN", "org.reflections": "ERROR"})


def worker_properties(
    bootstrap: str, rest_port: int, *, exactly_once: bool, group: str = "outboxkit-connect"
) -> str:
    """Worker config tuned for one small local worker on a single-node broker."""
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
    return "".join(f"{k}={v}\n" for k, v in settings.items())


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
) -> int:
    """Start the worker and wait until its REST API answers; return its PID."""
    workdir.mkdir(parents=True, exist_ok=True)
    props = workdir / "worker.properties"
    props.write_text(
        worker_properties(bootstrap, rest_port, exactly_once=exactly_once, group=group)
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
    wait_until("kafka connect", client.ready, timeout=240, pid=pid, log=log, poll=0.5)
    return pid
