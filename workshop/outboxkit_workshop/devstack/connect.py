"""An embedded Kafka Connect distributed worker running Debezium."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from cdc.connect import ConnectClient
from cdc.limits import WORKER_SETTINGS
from outboxkit_workshop.devstack.processes import (
    LOOPBACK,
    Host,
    alive,
    free_port,
    java_properties,
    log4j2_properties,
    released,
    start,
    stop,
    wait_until,
)
from outboxkit_workshop.devstack.state import EMBEDDED, Component, Node, StackState

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
    replication: int = 1,
    address: str = LOOPBACK.address,
    plugin_path: Path | None = None,
) -> str:
    """Worker config tuned for small local workers (one, or a group of several sharing
    ``group``'s storage topics, each replicated ``replication`` times); with ``kafka_security``
    (outboxkit.kernel.kafka.security.connect_worker_config) for a SASL/TLS cluster; with
    ``plugin_path``, plugins are also loaded from that directory (as a team's own worker)."""
    settings = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "listeners": f"http://{address}:{rest_port}",
        "rest.advertised.host.name": address,
        "rest.advertised.port": str(rest_port),
        "plugin.discovery": "service_load",
        "key.converter": "org.apache.kafka.connect.json.JsonConverter",
        "key.converter.schemas.enable": "false",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "false",
        "config.storage.topic": f"_{group}-configs",
        "offset.storage.topic": f"_{group}-offsets",
        "status.storage.topic": f"_{group}-status",
        "config.storage.replication.factor": str(replication),
        "offset.storage.replication.factor": str(replication),
        "status.storage.replication.factor": str(replication),
        "offset.storage.partitions": "1",
        "status.storage.partitions": "1",
        "offset.flush.interval.ms": "1000",
        # A lost worker's tasks move in seconds: the group notices it after session.timeout.ms
        # without a heartbeat, and with no scheduled delay (Connect's default holds a departed
        # worker's tasks for 5 minutes, waiting for it to return) the next rebalance gives them
        # to a live worker at once. With exactly-once source the new task's producer fences the
        # old one's transactional id first, so a worker that was only paused cannot commit.
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
    if plugin_path is not None:
        settings["plugin.path"] = str(plugin_path)
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
    replication: int = 1,
    wait: bool = True,
    host: Host = LOOPBACK,
    plugin_path: Path | None = None,
) -> int:
    """Start the worker on ``host`` and (``wait``) wait until its herder is ready; return its
    PID."""
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
            replication=replication,
            address=host.address,
            plugin_path=plugin_path,
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
    pid = start("connect", argv, log=log, cwd=workdir, host=host)
    if wait:
        wait_ready(pid, rest_port, log, host.address)
    return pid


def wait_ready(pid: int, rest_port: int, log: Path, address: str = LOOPBACK.address) -> None:
    """Wait until the worker's herder is ready; stop it if it never is."""
    client = ConnectClient(f"http://{address}:{rest_port}", timeout=5)
    # Started means the herder is ready (/health), not only the REST server (see ready()).
    try:
        wait_until("kafka connect", client.ready, timeout=240, pid=pid, log=log, poll=0.5)
    except BaseException:
        stop(pid)  # never recorded in the state file: `stack down` could not stop it
        raise


def worker_dir(root: Path, size: int, index: int) -> Path:
    """A worker's directory under the stack's ``root`` (a single worker's is root/connect)."""
    return root / "connect" if size == 1 else root / "connect" / f"worker-{index}"


def worker_log(logs: Path, size: int, index: int) -> Path:
    return logs / "connect.log" if size == 1 else logs / f"connect-{index}.log"


def ensure(
    root: Path,
    logs: Path,
    size: int,
    previous: Component | None,
    launch: Callable[[Node, Path, Path], int],
    *,
    restart_all: bool = False,
    hosts: Callable[[str], Host] = lambda name: LOOPBACK,
) -> Component:
    """``size`` workers of one group, each running and ready: a worker of ``previous`` that
    answers is kept (all are started again when ``restart_all``: their broker restarted), the
    others started on their REST ports by ``launch(node, workdir, log)``. The endpoint is the
    first worker's URL; every worker serves the group's REST API."""
    old = {n.name: n for n in previous.nodes} if previous else {}
    nodes: list[Node] = []
    for index in range(1, size + 1):
        name = f"connect-{index}"
        kept = old.get(name)
        # A restarted worker keeps its REST port, so clients holding the URL keep working.
        port = kept.port if kept and kept.port else free_port()
        url = f"http://{hosts(name).address}:{port}"
        nodes.append(Node(name, "connect worker", kept.pid if kept else None, port, url))
    started: list[tuple[Node, Path]] = []
    for index, node in enumerate(nodes, start=1):
        assert node.port
        if alive(node.pid):
            answers = ConnectClient(node.endpoint, timeout=5).alive()
            if answers and not restart_all:
                continue
            stop(node.pid)  # its broker restarted: a fresh worker rejoins cleanly
        log = worker_log(logs, size, index)
        address = hosts(node.name).address
        wait_until(f"port {node.port} free", released(node.port, address), timeout=30)
        node.pid = launch(node, worker_dir(root, size, index), log)
        started.append((node, log))
    for node, log in started:
        assert node.pid and node.port
        wait_ready(node.pid, node.port, log, hosts(node.name).address)
    return Component(EMBEDDED, nodes[0].endpoint, nodes)


def live_url(state: StackState) -> str:
    """The REST URL of a recorded Connect worker that runs (any worker of the group serves the
    group's REST API; the first one, unless it is down)."""
    for node in state.connect.nodes:
        if alive(node.pid):
            return node.endpoint
    return state.connect.endpoint
