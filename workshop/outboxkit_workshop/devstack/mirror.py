"""A second Kafka cluster and a MirrorMaker 2 replica of topics into it, for tests and operators
who rehearse moving consumers to a mirrored cluster.

`start_cluster` starts a single-node KRaft cluster (outboxkit_workshop.devstack.broker's node, its
own
directory, loopback ports and cluster id); `start_mirror` runs MirrorMaker 2 as a dedicated process
(``org.apache.kafka.connect.mirror.MirrorMaker``, from ``connect-mirror`` on the Connect
classpath pinned in cdc/java) replicating topics from one cluster to another under
their own names. Both stop by PID (`Cluster.stop`, `Mirror.stop`, or the `running_*` context
managers)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import AdminClient

from outboxkit_workshop.devstack import broker
from outboxkit_workshop.devstack.artifacts import MissingArtifact
from outboxkit_workshop.devstack.processes import (
    free_port,
    java_properties,
    log4j2_properties,
    start,
    stop,
    wait_until,
)

MIRROR_MAIN = "org.apache.kafka.connect.mirror.MirrorMaker"
MIRROR_JAR = "connect-mirror-"
IDENTITY_POLICY = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"
# MirrorMaker's own progress at INFO; the clients' config dumps at INFO too, so the log shows
# the isolation level its consumers of the source really use.
LOG4J2 = log4j2_properties(
    "WARN",
    {
        "org.apache.kafka.connect.mirror": "INFO",
        "org.apache.kafka.clients.consumer.ConsumerConfig": "INFO",
    },
)


@dataclass
class Cluster:
    """A single-node Kafka cluster started by `start_cluster`."""

    workdir: Path
    pid: int
    port: int
    controller_port: int
    cluster_id: str
    log: Path

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> bool:
        """Stop the node (SIGTERM, then SIGKILL); True if it was running. Its data stays."""
        return stop(self.pid, timeout=30)


@dataclass
class Mirror:
    """A MirrorMaker 2 process started by `start_mirror`."""

    workdir: Path
    pid: int
    log: Path
    properties: Path

    def stop(self) -> bool:
        """Stop MirrorMaker (SIGTERM: its shutdown hook stops the connectors; then SIGKILL)."""
        return stop(self.pid, timeout=30)


def start_cluster(
    java: Path,
    broker_libs: Path,
    workdir: Path,
    *,
    extra: Mapping[str, str] | None = None,
    timeout: float = 90,
) -> Cluster:
    """Start a single-node KRaft cluster in ``workdir`` (its data under ``data/``, its log in
    ``broker.log``) on free loopback ports, formatted with a new cluster id of its own; return it
    once it answers (``extra``: server properties added or replaced)."""
    workdir.mkdir(parents=True, exist_ok=True)
    cluster = broker.cluster_id_of(workdir)  # kept with the data: a restart keeps the id
    port, controller_port = free_port(), free_port()
    log = workdir / "broker.log"
    pid = broker.launch(
        java, broker_libs, workdir, port, controller_port, log, extra, cluster=cluster
    )
    try:
        wait_until(
            f"kafka cluster in {workdir}",
            lambda: broker.ready(f"127.0.0.1:{port}"),
            timeout=timeout,
            pid=pid,
            log=log,
        )
    except BaseException:
        stop(pid)
        raise
    return Cluster(workdir, pid, port, controller_port, cluster, log)


def topics_regex(topics: Iterable[str]) -> str:
    """A MirrorMaker topic filter matching exactly ``topics`` (its filters are regexes)."""
    return "|".join(re.escape(topic) for topic in topics)


def mm2_properties(
    source: str,
    target: str,
    topics: str,
    *,
    source_alias: str = "A",
    target_alias: str = "B",
    refresh_seconds: int = 2,
    checkpoints: bool = True,
    extra: Mapping[str, str] | None = None,
) -> str:
    """An mm2.properties replicating the topics matching the regex ``topics`` from the cluster
    at ``source`` to the one at ``target`` under the same names (IdentityReplicationPolicy),
    one way, every internal topic with one replica. The replication consumers read committed
    records only: a transactional producer's aborted records (the outbox connector writes in
    transactions) are never mirrored. Group offsets are not synced: consumers that keep their
    offsets in their own database start over on the replica anyway. Without ``checkpoints``
    MirrorMaker logs an ERROR that it could not configure its checkpoint connector (harmless:
    the dedicated driver always tries to configure all three connectors)."""
    a, b = source_alias, target_alias
    settings = {
        "clusters": f"{a}, {b}",
        f"{a}.bootstrap.servers": source,
        f"{b}.bootstrap.servers": target,
        f"{a}->{b}.enabled": "true",
        f"{a}->{b}.topics": topics,
        f"{b}->{a}.enabled": "false",
        "replication.policy.class": IDENTITY_POLICY,
        # Every consumer of the source cluster, the replication consumer among them; and that
        # consumer's own override, which wins over it (measured on 4.3.1: either one alone keeps
        # aborted records off the target; with neither they are mirrored as ordinary records).
        f"{a}.consumer.isolation.level": "read_committed",
        f"{a}->{b}.source.consumer.isolation.level": "read_committed",
        "tasks.max": "1",
        "replication.factor": "1",
        "checkpoints.topic.replication.factor": "1",
        "heartbeats.topic.replication.factor": "1",
        "offset-syncs.topic.replication.factor": "1",
        "offset.storage.replication.factor": "1",
        "status.storage.replication.factor": "1",
        "config.storage.replication.factor": "1",
        "sync.topic.acls.enabled": "false",
        "sync.topic.configs.enabled": "true",
        "refresh.topics.interval.seconds": str(refresh_seconds),
        "refresh.groups.interval.seconds": str(max(refresh_seconds, 5)),
        "sync.topic.configs.interval.seconds": str(max(refresh_seconds, 5)),
        "emit.checkpoints.enabled": str(checkpoints).lower(),
        "emit.checkpoints.interval.seconds": str(max(refresh_seconds, 5)),
        "emit.heartbeats.enabled": "false",
        "sync.group.offsets.enabled": "false",
        # The dedicated herder's own worker settings: small and quick (the Connect classpath's
        # plugins all have ServiceLoader manifests).
        "plugin.discovery": "service_load",
        "offset.flush.interval.ms": "1000",
        "scheduled.rebalance.max.delay.ms": "0",
        **(extra or {}),
    }
    return java_properties(settings)


def status_topic(source_alias: str = "A") -> str:
    """The status topic of the flow from ``source_alias`` that MirrorMaker's dedicated herder
    creates on the target cluster (MirrorMakerConfig's naming)."""
    return f"mm2-status.{source_alias}.internal"


def _topic_exists(bootstrap: str, topic: str) -> bool:
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 2000})
    try:
        return topic in admin.list_topics(timeout=2).topics
    except Exception:  # the cluster is busy or restarting: poll again
        return False


def start_mirror(
    java: Path,
    connect_libs: Path,
    workdir: Path,
    source: str,
    target: str,
    topics: Iterable[str] | str,
    *,
    source_alias: str = "A",
    target_alias: str = "B",
    refresh_seconds: int = 2,
    checkpoints: bool = True,
    extra: Mapping[str, str] | None = None,
    timeout: float = 120,
) -> Mirror:
    """Run MirrorMaker 2 from ``source`` to ``target`` (bootstrap servers) for ``topics`` (names,
    or a regex as a str) in ``workdir`` (its mm2.properties and mirror.log); return once its
    herder for the flow runs (its status topic exists on the target). The classpath is the
    cached Connect jars (connect-mirror is pinned beside connect-runtime)."""
    if not any(connect_libs.glob(f"{MIRROR_JAR}[0-9]*.jar")):
        raise MissingArtifact(
            f"{connect_libs} lacks {MIRROR_JAR}*.jar (MirrorMaker 2): "
            "run `outboxkit dev stack install`"
        )
    pattern = topics if isinstance(topics, str) else topics_regex(topics)
    workdir.mkdir(parents=True, exist_ok=True)
    props = workdir / "mm2.properties"
    props.write_text(
        mm2_properties(
            source,
            target,
            pattern,
            source_alias=source_alias,
            target_alias=target_alias,
            refresh_seconds=refresh_seconds,
            checkpoints=checkpoints,
            extra=extra,
        )
    )
    log4j = workdir / "log4j2.properties"
    log4j.write_text(LOG4J2)
    log = workdir / "mirror.log"
    argv = [
        str(java),
        "-Xms128m",
        "-Xmx512m",
        "-XX:+UseSerialGC",
        f"-Dlog4j2.configurationFile={log4j}",
        "-cp",
        f"{connect_libs}/*",
        MIRROR_MAIN,
        str(props),
        "--clusters",
        target_alias,  # run only the herder of flows into the target
    ]
    pid = start("mirrormaker", argv, log=log, cwd=workdir)
    try:
        wait_until(
            "mirrormaker",
            lambda: _topic_exists(target, status_topic(source_alias)),
            timeout=timeout,
            pid=pid,
            log=log,
        )
    except BaseException:
        stop(pid)
        raise
    return Mirror(workdir, pid, log, props)


@contextmanager
def running_cluster(
    java: Path, broker_libs: Path, workdir: Path, *, extra: Mapping[str, str] | None = None
) -> Iterator[Cluster]:
    """`start_cluster` for the block; the node is stopped at its end, also on failure."""
    cluster = start_cluster(java, broker_libs, workdir, extra=extra)
    try:
        yield cluster
    finally:
        cluster.stop()


@contextmanager
def running_mirror(
    java: Path,
    connect_libs: Path,
    workdir: Path,
    source: str,
    target: str,
    topics: Iterable[str] | str,
    *,
    refresh_seconds: int = 2,
    checkpoints: bool = True,
    extra: Mapping[str, str] | None = None,
) -> Iterator[Mirror]:
    """`start_mirror` for the block; MirrorMaker is stopped at its end, also on failure."""
    mirror = start_mirror(
        java,
        connect_libs,
        workdir,
        source,
        target,
        topics,
        refresh_seconds=refresh_seconds,
        checkpoints=checkpoints,
        extra=extra,
    )
    try:
        yield mirror
    finally:
        mirror.stop()
