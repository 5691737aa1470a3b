"""Where the faults of a cluster strike: the node that leads a partition, coordinates a
transactional id, is the active controller, or runs a connector's task, a Spark worker and its
executors; kill -9 of a node, and waiting until a lost worker's task runs elsewhere. The
campaign (`outboxkit_workshop.saga_harness.chaos`) and the fault tests use these on the embedded
stack."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from confluent_kafka.admin import AdminClient

from outboxkit.kernel.retry import wait_until
from outboxkit_workshop.devstack import broker, spark
from outboxkit_workshop.devstack.processes import StackError, alive, gone, process_tree, stop
from outboxkit_workshop.devstack.spark import ExecutorProcess
from outboxkit_workshop.devstack.state import EMBEDDED, Component, Node

if TYPE_CHECKING:  # kept out of the import: `outboxkit dev chaos --help` lists the fault kinds
    from outboxkit_workshop.devstack.stack import Stack

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


def partitions(stack: Stack, topic: str) -> int:
    """How many partitions ``topic`` has."""
    meta = _admin(stack).list_topics(topic, timeout=10).topics.get(topic)
    if meta is None or meta.error or not meta.partitions:
        raise StackError(f"topic {topic} does not exist")
    return len(meta.partitions)


def partition_leader(stack: Stack, topic: str, partition: int, timeout: float = 30) -> Node:
    """The node leading ``topic``'s ``partition`` now."""

    def leader() -> Node | None:
        meta = _admin(stack).list_topics(topic, timeout=10).topics.get(topic)
        part = meta.partitions.get(partition) if meta is not None and not meta.error else None
        return broker_node(stack, part.leader) if part is not None and part.leader >= 0 else None

    return wait_until(
        leader, timeout=timeout, what=f"a leader of {topic}[{partition}]", error=StackError
    )


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
    return _worker_node(stack, connector, task, status.worker_of(task))


def _worker_node(stack: Stack, connector: str, task: int, worker_id: str | None) -> Node:
    for node in stack.state.connect.nodes:
        if worker_id and node.endpoint.endswith(f"//{worker_id}"):
            return node
    raise StackError(f"task {connector}-{task} runs on no embedded worker ({worker_id})")


def wait_task_moved(
    stack: Stack, connector: str, away_from: Node, *, task: int = 0, timeout: float = 120
) -> tuple[Node, float]:
    """The worker ``connector``'s task runs on once it left ``away_from`` (killed or paused)
    and is RUNNING there, and the seconds that took."""
    # Asked of another worker that runs: a killed one cannot answer, a paused one would hang.
    via = next(
        (
            n.endpoint
            for n in stack.state.connect.nodes
            if n.name != away_from.name and alive(n.pid)
        ),
        None,
    )
    if via is None:
        raise StackError(f"no Connect worker but {away_from.name} runs: the task cannot move")
    client = stack.connect_client(via, timeout=5)
    began = time.monotonic()

    def moved() -> Node | None:
        status = client.status(connector)
        node = _worker_node(stack, connector, task, status.worker_of(task)) if status else None
        return node if status and status.running and node and node.name != away_from.name else None

    node = wait_until(
        moved,
        timeout=timeout,
        what=f"task {connector}-{task} to leave {away_from.name}",
        ignore=(StackError, OSError, RuntimeError),  # the group rebalancing
        error=StackError,
    )
    return node, time.monotonic() - began


def move_task(stack: Stack, connector: str, timeout: float = 300) -> tuple[Node, Node, float]:
    """kill -9 of the worker running ``connector``'s task; once the task runs on another
    worker, the old one is started again (`Stack.up`) and rejoins the group. Returns the
    worker killed, the one the task moved to, and the seconds the move took."""
    node = task_worker(stack, connector)
    kill(node, timeout=30)
    moved_to, seconds = wait_task_moved(stack, connector, node, timeout=timeout)
    stack.up()
    return node, moved_to, seconds


def spark_workers(stack: Stack) -> list[Node]:
    """The embedded Spark cluster's workers (none when Spark runs elsewhere or in the driver)."""
    component = stack.state.spark
    if component.mode != EMBEDDED:
        return []
    return [n for n in component.nodes if n.name.startswith("spark-worker-")]


def spark_executors(stack: Stack) -> list[tuple[Node, ExecutorProcess]]:
    """Every executor JVM that the embedded Spark workers run, with its worker."""
    return [(w, e) for w in spark_workers(stack) if w.pid for e in spark.executors_of(w.pid)]


def kill_spark_worker(node: Node, timeout: float = 10) -> list[ExecutorProcess]:
    """kill -9 of a Spark worker together with its executors, as when its machine is lost;
    returns the executors killed."""
    if node.pid is None or not alive(node.pid):
        raise StackError(f"{node.name} does not run")
    executors = spark.executors_of(node.pid)
    pids = [node.pid, *(e.pid for e in executors)]
    for pid in pids:
        _signal(pid, signal.SIGKILL)
    for pid in pids:
        gone(pid, timeout)
    return executors


def kill_executor(executor: ExecutorProcess, timeout: float = 10) -> None:
    """kill -9 of one executor JVM (its worker reports it lost and starts another)."""
    if not alive(executor.pid):
        raise StackError(f"executor {executor.executor_id} (pid {executor.pid}) does not run")
    _signal(executor.pid, signal.SIGKILL)
    gone(executor.pid, timeout)


def freeze(executor: ExecutorProcess) -> list[int]:
    """SIGSTOP of an executor JVM and its Python workers, as a long GC pause or a stopped VM
    freezes them: alive, connections open, answering nothing. Returns the PIDs to `thaw`."""
    if not alive(executor.pid):
        raise StackError(f"executor {executor.executor_id} (pid {executor.pid}) does not run")
    pids = process_tree(executor.pid)
    for pid in pids:
        _signal(pid, signal.SIGSTOP)
    return pids


def thaw(pids: Sequence[int]) -> None:
    """SIGCONT of what `freeze` stopped (those still there)."""
    for pid in pids:
        _signal(pid, signal.SIGCONT)


def wait_executors(stack: Stack, timeout: float = 180) -> list[tuple[Node, ExecutorProcess]]:
    """The executors of `spark_executors` once there is one (a driver just started has none)."""
    return wait_until(
        lambda: spark_executors(stack),
        timeout=timeout,
        poll=1.0,
        what="an executor on the Spark workers",
        error=StackError,
    )


def restart(stack: Stack, node: Node, pause: float, sig: int = signal.SIGKILL) -> str:
    """``sig`` to ``node`` (kill -9 by default; a gentler signal is followed by SIGKILL if the
    node outlives it by 60 s) and after ``pause`` seconds `Stack.up`, which starts it again on
    its ports and data, as a supervisor would (only what is down is started). Returns its
    name."""
    if node.pid is None or not alive(node.pid):
        raise StackError(f"{node.name} does not run")
    stop(node.pid, sig=sig, timeout=60)
    time.sleep(pause)
    stack.up()
    return node.name


def kill(node: Node, sig: int = signal.SIGKILL, timeout: float = 10) -> None:
    """Send ``sig`` (kill -9 by default) to ``node`` and wait until it is gone."""
    if node.pid is None or not alive(node.pid):
        raise StackError(f"{node.name} does not run")
    os.kill(node.pid, sig)
    gone(node.pid, timeout)


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # gone already (it exited with its worker)
        os.kill(pid, sig)


def pause(node: Node) -> None:
    """SIGSTOP: the node stops answering but lives on (a zombie once the group drops it)."""
    if node.pid is None or not alive(node.pid):
        raise StackError(f"{node.name} does not run")
    os.kill(node.pid, signal.SIGSTOP)


def resume(node: Node) -> None:
    """SIGCONT of a paused node."""
    if node.pid is not None and alive(node.pid):
        os.kill(node.pid, signal.SIGCONT)
