"""The fault kinds of `outboxkit dev chaos`: what each strikes and how it is repaired, the shape of
stack it needs and which kinds a shape offers (plain data and functions), then how each is
struck (`inject`) on a running stack and saga. Light to import: `outboxkit dev chaos --help` lists
the kinds."""

from __future__ import annotations

import random
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from outboxkit_workshop.saga_harness.targets import SERVICES, pick, saga_connectors, saga_topics

if TYPE_CHECKING:
    from outboxkit_workshop.devstack.settings import StackSettings
    from outboxkit_workshop.devstack.stack import Stack
    from outboxkit_workshop.saga_harness.processes import Saga


FREEZE_SECONDS = 40.0  # how long `spark-executor-freeze` stops an executor
# Faults that last after their strike returns (a freeze, let go on a timer): `repaired` waits.
_LASTING: list[threading.Thread] = []


class FaultKindError(ValueError):
    """A fault kind that does not exist, or that the stack's shape cannot strike."""


@dataclass(frozen=True)
class Shape:
    """The nodes a campaign can strike: each engine's embedded nodes (0: external, or for Spark
    inside the consumer driver) and the processes per saga service."""

    postgres: int = 1
    brokers: int = 1
    connect_workers: int = 1
    spark_workers: int = 0
    replicas: int = 1
    # Each node in a network namespace of its own (OUTBOXKIT_NETWORK=namespaces): its links
    # can be cut and slowed.
    partitionable: bool = False

    @classmethod
    def of(cls, settings: StackSettings) -> Shape:
        """The shape ``settings`` give the embedded stack (external engines count 0)."""
        return cls(
            postgres=0 if settings.database_url else 1,
            brokers=0 if settings.kafka_bootstrap_servers else settings.kafka_brokers,
            connect_workers=0 if settings.connect_url else settings.connect_workers,
            spark_workers=0 if settings.spark_master else settings.spark_workers,
            replicas=settings.service_replicas,
            partitionable=settings.network == "namespaces",
        )

    def describe(self) -> str:
        return (
            f"{self.postgres} embedded Postgres, {self.brokers} Kafka node(s), "
            f"{self.connect_workers} Connect worker(s), {self.spark_workers} Spark worker(s), "
            f"{self.replicas} replica(s) per service"
            + (", each node in its own network namespace" if self.partitionable else "")
        )


@dataclass(frozen=True)
class Kind:
    """One fault kind: its name, what it does (one line) and what the shape must have."""

    name: str
    summary: str
    needs: str = ""  # in words; empty when any shape will do
    fits: Callable[[Shape], bool] = lambda shape: True


def _service_kill(service: str) -> Kind:
    summary = f"kill -9 of one {service} replica (random of several), back after 1-3 s"
    return Kind(f"{service}-kill", summary)


# What the cluster kinds need, in words.
KAFKA_CLUSTER, CONNECT_GROUP = "3+ Kafka nodes", "2+ Connect workers"
SPARK_CLUSTER = "Spark workers"
PARTITIONABLE = "the partitionable network"
KAFKA_PARTITIONABLE = f"{KAFKA_CLUSTER} on {PARTITIONABLE}"
CONNECT_PARTITIONABLE = f"{CONNECT_GROUP} on {PARTITIONABLE}"


def _partitionable(shape: Shape) -> bool:
    return shape.partitionable and shape.postgres >= 1 and shape.brokers >= 1


# The network faults (`outboxkit_workshop.saga_harness.partitions`, struck by `inject`): offered on
# the
# partitionable network only, so a seed plans the same campaign on loopback as before.
NETWORK_KINDS: tuple[Kind, ...] = (
    Kind(
        "leader-isolated",
        "the leader of a random saga partition cut from the other brokers for 10-20 s",
        KAFKA_PARTITIONABLE,
        lambda s: _partitionable(s) and s.brokers >= 3,
    ),
    Kind(
        "controller-isolated",
        "the active controller cut from the other brokers for 10-20 s",
        KAFKA_PARTITIONABLE,
        lambda s: _partitionable(s) and s.brokers >= 3,
    ),
    Kind(
        "leader-deaf",
        "one way: the other brokers' packets to a saga partition's leader lost for 10-20 s",
        KAFKA_PARTITIONABLE,
        lambda s: _partitionable(s) and s.brokers >= 3,
    ),
    Kind(
        "connect-kafka-cut",
        "the worker running a saga connector's task cut from Kafka, not Postgres, 10-20 s",
        PARTITIONABLE,
        lambda s: _partitionable(s) and s.connect_workers >= 1,
    ),
    Kind(
        "connect-workers-split",
        "a Connect worker cut from the other workers only for 10-20 s",
        CONNECT_PARTITIONABLE,
        lambda s: _partitionable(s) and s.connect_workers >= 2,
    ),
    Kind(
        "commit-in-doubt",
        "one way: Postgres's answers to the consumers lost 3-8 s, then their connections "
        "ended (a COMMIT sent meanwhile is applied, its answer never arrives)",
        PARTITIONABLE,
        _partitionable,
    ),
    Kind(
        "service-postgres-cut",
        "a service replica cut from Postgres for 10-20 s",
        PARTITIONABLE,
        _partitionable,
    ),
    Kind(
        "consumer-kafka-slow",
        "200 ms ± 50 ms each way and 1% loss between the consumers and Kafka for 30-45 s",
        PARTITIONABLE,
        _partitionable,
    ),
)

# Single-node kinds first, in the order campaigns before clusters drew them: a seed plans the
# same campaign on one node as it did then.
KINDS: tuple[Kind, ...] = (
    Kind("spark-kill", "kill -9 of the consumer driver, back after 1-3 s"),
    Kind(
        "connect-kill",
        "kill -9 of the Connect worker, back after 1-3 s",
        "one Connect worker (a group's: connect-worker-kill)",
        lambda s: s.connect_workers == 1,
    ),
    *(_service_kill(service) for service in SERVICES),
    Kind(
        "postgres-crash",
        "Postgres's immediate shutdown (crash recovery on start), back after 6 s",
        "embedded Postgres",
        lambda s: s.postgres >= 1,
    ),
    Kind(
        "broker-restart",
        "SIGTERM of a Kafka node (random of several: a rolling restart's step), back after 4 s",
        "embedded Kafka",
        lambda s: s.brokers >= 1,
    ),
    Kind("connect-task-restart", "every connector and task restarted through Connect's REST API"),
    Kind(
        "kafka-leader-kill",
        "kill -9 of the leader of a random saga topic partition, back after 2-5 s",
        KAFKA_CLUSTER,
        lambda s: s.brokers >= 3,
    ),
    Kind(
        "kafka-coordinator-kill",
        "kill -9 of the transaction coordinator of a saga connector's task, back after 2-5 s",
        KAFKA_CLUSTER,
        lambda s: s.brokers >= 3,
    ),
    Kind(
        "kafka-controller-kill",
        "kill -9 of the active controller, back after 2-5 s",
        KAFKA_CLUSTER,
        lambda s: s.brokers >= 3,
    ),
    Kind(
        "connect-worker-kill",
        "kill -9 of the worker running a saga connector's task; back once the task moved",
        CONNECT_GROUP,
        lambda s: s.connect_workers >= 2,
    ),
    Kind(
        "spark-worker-kill",
        "kill -9 of a Spark worker with its executors, back after 3-6 s",
        SPARK_CLUSTER,
        lambda s: s.spark_workers >= 1,
    ),
    Kind(
        "spark-executor-kill",
        "kill -9 of a Spark executor (its worker starts another)",
        SPARK_CLUSTER,
        lambda s: s.spark_workers >= 1,
    ),
    Kind(
        "spark-executor-freeze",
        f"a Spark executor and its Python workers stopped (SIGSTOP) for {FREEZE_SECONDS:g} s, "
        "as a GC pause or a stopped VM does, then let go on",
        SPARK_CLUSTER,
        lambda s: s.spark_workers >= 2,  # the straggler's copy runs on another worker
    ),
    *NETWORK_KINDS,
)
BY_NAME = {kind.name: kind for kind in KINDS}
NAMES = tuple(BY_NAME)


def offered(shape: Shape) -> tuple[str, ...]:
    """The kinds ``shape`` can strike: the default of a campaign on it."""
    return tuple(kind.name for kind in KINDS if kind.fits(shape))


def check(names: Sequence[str], shape: Shape) -> tuple[str, ...]:
    """``names`` when each is a kind ``shape`` can strike; else FaultKindError says why."""
    unknown = sorted(set(names) - set(NAMES))
    if unknown:
        raise FaultKindError(f"unknown fault kind(s) {unknown}: choose from {list(NAMES)}")
    unfit = [BY_NAME[n] for n in dict.fromkeys(names) if not BY_NAME[n].fits(shape)]
    if unfit:
        needs = "; ".join(f"{k.name} needs {k.needs}" for k in unfit)
        cluster = any(k.needs in (KAFKA_CLUSTER, CONNECT_GROUP, SPARK_CLUSTER) for k in unfit)
        hint = " (OUTBOXKIT_CLUSTER=true: the cluster shape)" if cluster else ""
        if any(k in NETWORK_KINDS for k in unfit):
            hint += " (OUTBOXKIT_NETWORK=namespaces, as root: the partitionable network)"
        raise FaultKindError(
            f"{needs}; this stack runs {shape.describe()}{hint}. Kinds it can strike: "
            f"{', '.join(offered(shape))}"
        )
    return tuple(names)


def help_lines() -> str:
    """Every kind on a line of its own, with what it needs (`outboxkit dev chaos --help`)."""
    return "\n".join(
        f"{k.name:23} {k.summary}" + (f" [{k.needs}]" if k.needs else "") for k in KINDS
    )


# -- how each kind strikes ----------------------------------------------------------------
Strike = Callable[["Stack", "Saga", random.Random], str]


def kill_process(saga: Saga, name: str, pause: float) -> str:
    """kill -9 of a saga process; started again (a service on its port) after ``pause``."""
    saga.kill(name)
    time.sleep(pause)
    saga.start([name])
    return name


def kill_consumers(stack: Stack, saga: Saga, rng: random.Random) -> str:
    return kill_process(saga, "consumers", rng.uniform(1, 3))


def kill_connect(stack: Stack, saga: Saga, rng: random.Random) -> str:
    from outboxkit_workshop.devstack import faults as nodes

    return nodes.restart(stack, stack.state.connect.nodes[0], rng.uniform(1, 3))


def crash_postgres(stack: Stack) -> str:
    """Postgres's immediate shutdown (SIGQUIT: no checkpoint, crash recovery on start), started
    again after 6 s."""
    from outboxkit_workshop.devstack import faults as nodes

    return nodes.restart(stack, stack.state.postgres.nodes[0], 6, signal.SIGQUIT)


def restart_broker(stack: Stack, rng: random.Random | None = None) -> str:
    """A Kafka node (random of several) stopped with SIGTERM, a controlled shutdown that hands
    its leaderships over first (a rolling restart's step), started again after 4 s; on one
    node, `Stack.up` also heals hanging transactions and starts Connect afresh."""
    from outboxkit_workshop.devstack import faults as nodes

    node = pick(stack.state.broker.nodes, rng or random.Random())
    return nodes.restart(stack, node, 4, signal.SIGTERM)


def restart_connect_tasks(stack: Stack) -> str:
    """Every connector and its tasks restarted through Connect's REST API, as an operator or a
    rebalance does."""
    client = stack.connect_client()
    for name in stack.state.connectors:
        client.restart(name, include_tasks=True)
    return "every connector"


def kill_partition_leader(stack: Stack, saga: Saga, rng: random.Random) -> str:
    from outboxkit_workshop.devstack import faults as nodes

    topic = rng.choice(saga_topics(stack))
    partition = rng.randrange(nodes.partitions(stack, topic))
    node = nodes.partition_leader(stack, topic, partition)
    saga.echo(f"{node.name} leads {topic}[{partition}]")
    return nodes.restart(stack, node, rng.uniform(2, 5))


def kill_coordinator(stack: Stack, saga: Saga, rng: random.Random) -> str:
    from outboxkit_workshop.devstack import faults as nodes

    connector = rng.choice(saga_connectors(stack, saga))
    node = nodes.connect_task_coordinator(stack, connector)
    saga.echo(f"{node.name} coordinates the transactions of {connector}'s task")
    return nodes.restart(stack, node, rng.uniform(2, 5))


def kill_controller(stack: Stack, saga: Saga, rng: random.Random) -> str:
    from outboxkit_workshop.devstack import faults as nodes

    return nodes.restart(stack, nodes.active_controller(stack), rng.uniform(2, 5))


def kill_task_worker(stack: Stack, saga: Saga, rng: random.Random) -> str:
    from outboxkit_workshop.devstack import faults as nodes

    connector = rng.choice(saga_connectors(stack, saga))
    killed, moved_to, seconds = nodes.move_task(stack, connector)
    saga.echo(f"{connector}'s task moved {killed.name} -> {moved_to.name} in {seconds:.1f}s")
    return killed.name


def kill_spark_worker(stack: Stack, saga: Saga, rng: random.Random) -> str:
    """kill -9 of a Spark worker and its executors (its machine lost), started again after
    3-6 s; the master then gives it new executors."""
    from outboxkit_workshop.devstack import faults as nodes

    node = pick(nodes.spark_workers(stack), rng)
    executors = nodes.kill_spark_worker(node)
    saga.echo(f"{node.name} killed with {len(executors)} executor(s)")
    time.sleep(rng.uniform(3, 6))
    stack.up()
    return node.name


def kill_spark_executor(stack: Stack, saga: Saga, rng: random.Random) -> str:
    from outboxkit_workshop.devstack import faults as nodes

    running = sorted(nodes.wait_executors(stack), key=lambda found: found[1].pid)
    worker, executor = rng.choice(running)
    nodes.kill_executor(executor)  # its worker reports it lost; the master starts another
    return f"{worker.name}/executor-{executor.executor_id}"


def freeze_spark_executor(stack: Stack, saga: Saga, rng: random.Random) -> str:
    """An executor and its Python workers stopped for FREEZE_SECONDS, let go on a thread of
    its own: the strike returns at once, so that a probe order placed now measures what the
    saga does while the executor is frozen (`repaired` waits for the thaw)."""
    from outboxkit_workshop.devstack import faults as nodes

    running = sorted(nodes.wait_executors(stack), key=lambda found: found[1].pid)
    worker, executor = rng.choice(running)
    pids = nodes.freeze(executor)

    def thaw() -> None:
        time.sleep(FREEZE_SECONDS)
        nodes.thaw(pids)

    lasting = threading.Thread(target=thaw, name="thaw", daemon=True)
    lasting.start()
    _LASTING.append(lasting)
    return f"{worker.name}/executor-{executor.executor_id}"


def repaired(timeout: float = FREEZE_SECONDS + 30) -> None:
    """Once every fault that outlasts its strike (a freeze) is over."""
    while _LASTING:
        lasting = _LASTING.pop()
        lasting.join(timeout)
        if lasting.is_alive():
            raise RuntimeError(f"a lasting fault ({lasting.name}) did not end in {timeout:g} s")


# The faults no consumer or service is restarted for: they ride them out (the e2e tests strike
# these mid-run, by the stack alone).
ROUTINE: dict[str, Callable[[Stack], str]] = {
    "postgres-crash": crash_postgres,
    "broker-restart": restart_broker,
    "connect-task-restart": restart_connect_tasks,
}
STRIKES: dict[str, Strike] = {
    "spark-kill": kill_consumers,
    "connect-kill": kill_connect,
    "postgres-crash": lambda stack, saga, rng: crash_postgres(stack),
    "broker-restart": lambda stack, saga, rng: restart_broker(stack, rng),
    "connect-task-restart": lambda stack, saga, rng: restart_connect_tasks(stack),
    "kafka-leader-kill": kill_partition_leader,
    "kafka-coordinator-kill": kill_coordinator,
    "kafka-controller-kill": kill_controller,
    "connect-worker-kill": kill_task_worker,
    "spark-worker-kill": kill_spark_worker,
    "spark-executor-kill": kill_spark_executor,
    "spark-executor-freeze": freeze_spark_executor,
}


def inject(kind: str, stack: Stack, saga: Saga, rng: random.Random) -> str:
    """One fault of ``kind`` (see `outboxkit_workshop.saga_harness.faults`), repaired as production
    would;
    returns the name of the node or process it struck."""
    service = kind.removesuffix("-kill")
    if service in SERVICES:
        return kill_process(saga, pick(saga.replicas_of(service), rng), rng.uniform(1, 3))
    if kind in {k.name for k in NETWORK_KINDS}:
        from outboxkit_workshop.saga_harness import partitions

        return partitions.STRIKES[kind](stack, saga, rng)
    if kind not in STRIKES:
        raise FaultKindError(f"unknown fault {kind!r}: choose from {sorted(STRIKES)}")
    return STRIKES[kind](stack, saga, rng)
