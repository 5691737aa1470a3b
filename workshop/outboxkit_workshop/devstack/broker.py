"""The embedded Apache Kafka cluster: one or more KRaft nodes (broker + controller each) on
loopback, each its own process, ports and log directory; one node is the cluster of size one."""

from __future__ import annotations

import base64
import functools
import json
import subprocess
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from confluent_kafka.admin import AdminClient

from cdc.limits import BROKER_SETTINGS
from outboxkit_workshop.devstack.processes import (
    LOOPBACK,
    Host,
    StackError,
    alive,
    free_port,
    java_properties,
    log4j2_properties,
    port_open,
    released,
    start,
    stop,
    wait_until,
)
from outboxkit_workshop.devstack.state import EMBEDDED, Component, Node

LOG4J2 = log4j2_properties("WARN", {"kafka.server.BrokerServer": "INFO"})


def replication(size: int) -> tuple[int, int]:
    """(replication factor, min.insync.replicas) for a cluster of ``size`` nodes: 1 and 1 on
    one node; from three nodes on, 3 and 2, so an acknowledged record survives the loss of one
    broker and a partition with one replica left refuses writes rather than risk them."""
    if size < 3:
        return 1, 1
    return 3, 2


def voters(controller_ports: Mapping[int, int], addresses: Mapping[int, str] | None = None) -> str:
    """The static KRaft quorum ``id@host:port,...`` of every node's controller listener (each
    node on loopback, or on its address in ``addresses``)."""
    where = addresses or {}
    return ",".join(
        f"{node}@{where.get(node, LOOPBACK.address)}:{port}"
        for node, port in sorted(controller_ports.items())
    )


def server_properties(
    data: Path,
    port: int,
    controller_port: int,
    extra: Mapping[str, str] | None = None,
    *,
    node_id: int = 1,
    quorum: str | None = None,
    size: int = 1,
    address: str = LOOPBACK.address,
) -> str:
    """A KRaft node's config (broker and controller): on one node transactions and compaction
    work with replication factor 1; in a cluster of ``size`` nodes (``quorum``: see `voters`)
    every topic, the internal ones included, has 3 replicas and 2 in sync; ``extra`` adds or
    replaces properties (e.g. a SASL listener)."""
    factor, min_isr = replication(size)
    settings = {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": quorum or f"{node_id}@{address}:{controller_port}",
        "listeners": f"PLAINTEXT://{address}:{port},CONTROLLER://{address}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{address}:{port}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(data),
        "num.partitions": "4",
        "auto.create.topics.enable": "true",
        "default.replication.factor": str(factor),
        "min.insync.replicas": str(min_isr),
        # A replica that was out of sync never becomes leader: it could lack acknowledged records.
        "unclean.leader.election.enable": "false",
        "offsets.topic.replication.factor": str(factor),
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": str(factor),
        "transaction.state.log.min.isr": str(min_isr),
        "transaction.state.log.num.partitions": "4",
        "share.coordinator.state.topic.replication.factor": str(factor),
        "share.coordinator.state.topic.min.isr": str(min_isr),
        "group.initial.rebalance.delay.ms": "0",
        # A broker that stops heartbeating is fenced, and its partitions' leadership moves to an
        # in-sync replica, after 6 s (Kafka's default is 9 s).
        "broker.session.timeout.ms": "6000",
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


def format_storage(
    java: Path, libs: Path, props: Path, data: Path, log: Path, cluster: str | None = None
) -> None:
    """Format the KRaft log directory once (kept across restarts with its data); every node of
    one cluster is formatted with the same ``cluster`` id."""
    if (data / "meta.properties").exists():
        return
    argv = [
        str(java),
        "-cp",
        _classpath(libs),
        "kafka.tools.StorageTool",
        "format",
        f"--cluster-id={cluster or cluster_id()}",
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


def ready(bootstrap: str, brokers: int = 1) -> bool:
    """True when the node at ``bootstrap`` answers a metadata request that lists ``brokers``
    brokers (a cluster's node answers once the quorum has a leader and the others registered)."""
    address, _, port = bootstrap.rpartition(":")
    if not port_open(int(port), address):
        return False
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 2000})
    try:
        return len(admin.list_topics(timeout=2).brokers) >= brokers
    except Exception:  # not up yet: any client error means "poll again"
        return False


def launch(
    java: Path,
    libs: Path,
    workdir: Path,
    port: int,
    controller_port: int,
    log: Path,
    extra: Mapping[str, str] | None = None,
    *,
    node_id: int = 1,
    quorum: str | None = None,
    size: int = 1,
    cluster: str | None = None,
    host: Host = LOOPBACK,
) -> int:
    """Start one node (formatting its storage the first time) and return its PID at once: a
    cluster's nodes only answer once a majority of the quorum runs, so they start together.
    ``host``: where it runs and listens."""
    data = workdir / "data"
    workdir.mkdir(parents=True, exist_ok=True)
    props = workdir / "server.properties"
    props.write_text(
        server_properties(
            data,
            port,
            controller_port,
            extra,
            node_id=node_id,
            quorum=quorum,
            size=size,
            address=host.address,
        )
    )
    log4j = workdir / "log4j2.properties"
    log4j.write_text(LOG4J2)
    format_storage(java, libs, props, data, log, cluster)
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
    return start(f"kafka-{node_id}", argv, log=log, cwd=workdir, host=host)


def start_broker(
    java: Path,
    libs: Path,
    workdir: Path,
    port: int,
    controller_port: int,
    log: Path,
    extra: Mapping[str, str] | None = None,
) -> int:
    """Start a single-node broker; return its PID once it answers on its PLAINTEXT listener
    (``extra``: see `server_properties`)."""
    pid = launch(java, libs, workdir, port, controller_port, log, extra)
    wait_until("kafka broker", lambda: ready(f"127.0.0.1:{port}"), timeout=90, pid=pid, log=log)
    return pid


def cluster_id_of(workdir: Path) -> str:
    """The cluster's id, made once and kept in ``workdir`` (every node is formatted with it)."""
    path = workdir / "cluster.id"
    if not path.exists():
        workdir.mkdir(parents=True, exist_ok=True)
        path.write_text(cluster_id())
    return path.read_text().strip()


def quorum_leader(data_dirs: Sequence[Path]) -> int | None:
    """The active controller's node id, as the nodes' quorum-state files last recorded it (the
    highest epoch any of ``data_dirs`` knows), None when no node knows one."""
    best: tuple[int, int] | None = None
    for data in data_dirs:
        try:
            raw = json.loads((data / "__cluster_metadata-0" / "quorum-state").read_text())
        except (OSError, ValueError):
            continue
        leader, epoch = raw.get("leaderId", -1), raw.get("leaderEpoch", -1)
        if leader is not None and leader >= 0 and (best is None or epoch > best[1]):
            best = (leader, epoch)
    return best[0] if best else None


def node_dir(root: Path, size: int, node_id: int) -> Path:
    """A node's directory under the stack's ``root``/kafka (a single node's is that folder, as
    before clusters, so its data is kept)."""
    return root / "kafka" if size == 1 else root / "kafka" / f"node-{node_id}"


def node_log(logs: Path, size: int, node_id: int) -> Path:
    return logs / "broker.log" if size == 1 else logs / f"kafka-{node_id}.log"


def ensure(
    java: Path,
    libs: Path,
    root: Path,
    logs: Path,
    size: int,
    previous: Component | None,
    hosts: Callable[[str], Host] = lambda name: LOOPBACK,
) -> tuple[Component, list[str]]:
    """The embedded cluster of ``size`` nodes with every node running: the nodes of
    ``previous`` that still run are kept, the others started again on their ports and data
    (the quorum's static voter list names each controller's port). ``hosts``: where each node
    runs, by name. Returns the cluster and the names of the nodes started."""
    old = {n.name: n for n in previous.nodes} if previous and previous.mode == EMBEDDED else {}
    nodes: list[Node] = []
    where: dict[int, Host] = {}
    for node_id in range(1, size + 1):
        name = f"kafka-{node_id}"
        kept = old.get(name)
        where[node_id] = hosts(name)
        port = kept.port if kept and kept.port else free_port()
        controller = kept.extra_port if kept and kept.extra_port else free_port()
        nodes.append(
            Node(
                name,
                "broker+controller",
                kept.pid if kept else None,
                port,
                f"{where[node_id].address}:{port}",
                controller,
            )
        )
    quorum = voters(
        {i + 1: n.extra_port for i, n in enumerate(nodes) if n.extra_port},
        {node_id: host.address for node_id, host in where.items()},
    )
    cluster = cluster_id_of(root / "kafka")
    started: list[str] = []
    for node_id, node in enumerate(nodes, start=1):
        assert node.port and node.extra_port
        address = where[node_id].address
        if alive(node.pid) and port_open(node.port, address):
            continue
        stop(node.pid)  # a node that runs but does not answer is started afresh
        log = node_log(logs, size, node_id)
        for port in (node.port, node.extra_port):
            wait_until(f"port {port} free", released(port, address), timeout=30)
        node.pid = launch(
            java,
            libs,
            node_dir(root, size, node_id),
            node.port,
            node.extra_port,
            log,
            node_id=node_id,
            quorum=quorum,
            size=size,
            cluster=cluster,
            host=where[node_id],
        )
        started.append(node.name)
    for node_id, node in enumerate(nodes, start=1):
        if node.name in started:
            wait_until(
                node.name,
                functools.partial(ready, node.endpoint, size),
                timeout=120,
                pid=node.pid,
                log=node_log(logs, size, node_id),
            )
    bootstrap = ",".join(n.endpoint for n in nodes)
    return Component(EMBEDDED, bootstrap, nodes), started


def active_controller(root: Path, size: int) -> int | None:
    """The node id of the embedded cluster's active controller (see `quorum_leader`)."""
    return quorum_leader([node_dir(root, size, i) / "data" for i in range(1, size + 1)])
