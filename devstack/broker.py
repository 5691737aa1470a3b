"""The embedded Apache Kafka broker: one KRaft node (broker + controller) on loopback."""

from __future__ import annotations

import base64
import subprocess
import uuid
from collections.abc import Mapping
from pathlib import Path

from confluent_kafka.admin import AdminClient

from cdc.limits import BROKER_SETTINGS
from devstack.processes import (
    StackError,
    java_properties,
    log4j2_properties,
    port_open,
    start,
    wait_until,
)

LOG4J2 = log4j2_properties("WARN", {"kafka.server.BrokerServer": "INFO"})


def server_properties(
    data: Path, port: int, controller_port: int, extra: Mapping[str, str] | None = None
) -> str:
    """A single-node KRaft config: transactions and compaction work with replication factor 1;
    ``extra`` adds or replaces properties (e.g. a SASL listener)."""
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(data),
        "num.partitions": "4",
        "auto.create.topics.enable": "true",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "4",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        # Kafka's default record size limit, as a default production cluster has (cdc.limits).
        **BROKER_SETTINGS,
        "log.segment.bytes": "67108864",
        "num.network.threads": "2",
        "num.io.threads": "2",
        "log.retention.hours": "168",
        **(extra or {}),
    }
    return java_properties(settings)


def cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding, never starting with
    '-' (Kafka's own rule: the storage tool would read such an id as an option and fail)."""
    while True:
        candidate = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not candidate.startswith("-"):
            return candidate


def _classpath(libs: Path) -> str:
    return f"{libs}/*"


def format_storage(java: Path, libs: Path, props: Path, data: Path, log: Path) -> None:
    """Format the KRaft log directory once (kept across restarts with its data)."""
    if (data / "meta.properties").exists():
        return
    argv = [
        str(java),
        "-cp",
        _classpath(libs),
        "kafka.tools.StorageTool",
        "format",
        f"--cluster-id={cluster_id()}",
        "-c",
        str(props),
        "--ignore-formatted",
    ]
    done = subprocess.run(argv, capture_output=True, text=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as out:
        out.write(done.stdout + done.stderr)
    if done.returncode != 0:
        raise StackError(f"kafka storage format failed:\n{done.stdout}{done.stderr}")


def ready(bootstrap: str) -> bool:
    """True when the broker answers a metadata request."""
    port = int(bootstrap.rsplit(":", 1)[1])
    if not port_open(port):
        return False
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 2000})
    try:
        return bool(admin.list_topics(timeout=2).brokers)
    except Exception:  # not up yet: any client error means "poll again"
        return False


def start_broker(
    java: Path,
    libs: Path,
    workdir: Path,
    port: int,
    controller_port: int,
    log: Path,
    extra: Mapping[str, str] | None = None,
) -> int:
    """Start the broker (formatting its storage the first time); return its PID once it answers
    on its PLAINTEXT listener (``extra``: see `server_properties`)."""
    data = workdir / "data"
    workdir.mkdir(parents=True, exist_ok=True)
    props = workdir / "server.properties"
    props.write_text(server_properties(data, port, controller_port, extra))
    log4j = workdir / "log4j2.properties"
    log4j.write_text(LOG4J2)
    format_storage(java, libs, props, data, log)
    argv = [
        str(java),
        "-Xms256m",
        "-Xmx512m",
        "-XX:+UseSerialGC",
        f"-Dlog4j2.configurationFile={log4j}",
        "-cp",
        _classpath(libs),
        "kafka.Kafka",
        str(props),
    ]
    pid = start("broker", argv, log=log, cwd=workdir)
    wait_until("kafka broker", lambda: ready(f"127.0.0.1:{port}"), timeout=90, pid=pid, log=log)
    return pid
