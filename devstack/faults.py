"""Where the faults of a cluster strike: the node that leads a partition, coordinates a
transactional id, is the active controller, or runs a connector's task; and kill -9 of a node.
The campaign (`saga.chaos`) and the fault tests use these on the embedded stack."""

from __future__ import annotations

import os
import signal
import time

from confluent_kafka.admin import AdminClient

from devstack import broker
from devstack.processes import StackError, alive
from devstack.stack import Stack
from devstack.state import EMBEDDED, Component, Node

TRANSACTION_STATE_TOPIC = "__transaction_state"


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, 32-bit signed)."""
    h = 0
    data = text.encode("utf-16-le")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "little")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def coordinator_partition(transactional_id: str, partitions: int) -> int:
    """The ``__transaction_state`` partition whose leader coordinates ``transactional_id``
    (Kafka's ``Utils.abs(id.hashCode) % partitions``; ``Utils.abs`` maps MIN_VALUE to 0)."""
    h = java_string_hash(transactional_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def task_transactional_id(group: str, connector: str, task: int = 0) -> str:
    """The transactional id of an exactly-once source task's producer (KIP-618): derived from
    the worker group, the connector and the task, so a task started on another worker fences
    the producer of its predecessor."""
    return f"{group}-{connector}-{task}"


def _kafka(stack: Stack) -> Component:
    component = stack.state.broker
    if component.mode != EMBEDDED:
        raise StackError("cluster faults strike the embedded Kafka only")
    return component


def _admin(stack: Stack) -> AdminClient:
    return AdminClient({**stack.kafka_client_config(), "socket.timeout.ms": 5000})


def broker_node(stack: Stack, node_id: int) -> Node:
    """The embedded Kafka node with KRaft id ``node_id``."""
    return _kafka(stack).node(f"kafka-{node_id}")


def partition_leader(stack: Stack, topic: str, partition: int, timeout: float = 30) -> Node:
    """The node leading ``topic``'s ``partition`` now."""
    deadline = time.monotonic() + timeout
    while True:
        meta = _admin(stack).list_topics(topic, timeout=10).topics.get(topic)
        part = meta.partitions.get(partition) if meta is not None and not meta.error else None
        if part is not None and part.leader >= 0:
            return broker_node(stack, part.leader)
        if time.monotonic() > deadline:
            raise StackError(f"{topic}[{partition}] has no leader after {timeout:.0f}s")
        time.sleep(0.5)


def transaction_coordinator(stack: Stack, transactional_id: str) -> Node:
    """The node coordinating ``transactional_id``'s transactions now."""
    meta = _admin(stack).list_topics(TRANSACTION_STATE_TOPIC, timeout=10)
    count = len(meta.topics[TRANSACTION_STATE_TOPIC].partitions)
    partition = coordinator_partition(transactional_id, count)
    return partition_leader(stack, TRANSACTION_STATE_TOPIC, partition)


def connect_task_coordinator(stack: Stack, connector: str, task: int = 0) -> Node:
    """The node coordinating the transactions of ``connector``'s task (exactly-once source)."""
    group = f"{stack.settings.connector_name}-connect"
    return transaction_coordinator(stack, task_transactional_id(group, connector, task))


def active_controller(stack: Stack) -> Node:
    """The KRaft quorum's active controller."""
    leader = broker.active_controller(stack.dir, len(_kafka(stack).nodes))
    if leader is None:
        raise StackError("no node knows the quorum's leader yet")
    return broker_node(stack, leader)


def task_worker(stack: Stack, connector: str, task: int = 0, *, via: str | None = None) -> Node:
    """The Connect worker running ``connector``'s task ``task``, as the worker at REST URL
    ``via`` (any worker of the group, by default) says."""
    status = stack.connect_client(via, timeout=10).status(connector)
    if status is None:
        raise StackError(f"connector {connector} is not registered")
    worker_id = status.worker_of(task)
    for node in stack.state.connect.nodes:
        if worker_id and node.endpoint.endswith(f"//{worker_id}"):
            return node
    raise StackError(f"task {connector}-{task} runs on no embedded worker ({worker_id})")


def kill(node: Node, sig: int = signal.SIGKILL, timeout: float = 10) -> None:
    """Send ``sig`` (kill -9 by default) to ``node`` and wait until it is gone."""
    if node.pid is None or not alive(node.pid):
        raise StackError(f"{node.name} does not run")
    os.kill(node.pid, sig)
    deadline = time.monotonic() + timeout
    while alive(node.pid) and time.monotonic() < deadline:
        time.sleep(0.05)


def pause(node: Node) -> None:
    """SIGSTOP: the node stops answering but lives on (a zombie once the group drops it)."""
    if node.pid is None or not alive(node.pid):
        raise StackError(f"{node.name} does not run")
    os.kill(node.pid, signal.SIGSTOP)


def resume(node: Node) -> None:
    """SIGCONT of a paused node."""
    if node.pid is not None and alive(node.pid):
        os.kill(node.pid, signal.SIGCONT)
