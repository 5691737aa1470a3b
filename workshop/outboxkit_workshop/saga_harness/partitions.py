"""The network faults of `outboxkit dev chaos` on the partitionable network
(`outboxkit_workshop.devstack.network`): links between groups of nodes cut both ways or one way, or
slowed and made lossy, for a while, then healed. Each strike returns what it struck; the
campaign measures the recovery after it, as for the process faults."""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import text
from sqlalchemy.engine import Engine

from outboxkit.kernel.engines import engine_for
from outboxkit_workshop.devstack.network import Network, address_of, rule_of
from outboxkit_workshop.devstack.processes import StackError
from outboxkit_workshop.saga_harness.targets import SERVICES, pick, saga_connectors, saga_topics

if TYPE_CHECKING:
    from outboxkit_workshop.devstack.stack import Stack
    from outboxkit_workshop.saga_harness.processes import Saga

# How long a link stays cut or slowed, seconds (drawn in this range).
CUT_SECONDS = (10.0, 20.0)
# A slow link: 200 ms ± 50 ms each way, 1% of the packets lost.
SLOW_DELAY, SLOW_JITTER, SLOW_LOSS = 0.200, 0.050, 0.01
SLOW_SECONDS = (30.0, 45.0)


def network_of(stack: Stack) -> Network:
    """The stack's partitionable network; a clear error on a loopback stack."""
    network = stack.network()
    if network is None:
        raise StackError(
            "network faults need the partitionable network (OUTBOXKIT_NETWORK=namespaces)"
        )
    return network


@contextlib.contextmanager
def applied(stack: Stack, apply: Callable[[Network], None]) -> Iterator[Network]:
    """``apply`` the rules to the stack's network for the ``with`` block, then heal every link
    (also when the block fails): a campaign never leaves a link cut."""
    network = network_of(stack)
    try:
        apply(network)
        stack.save_network(network)
        yield network
    finally:
        network.heal()
        stack.save_network(network)


def hold(stack: Stack, saga: Saga, apply: Callable[[Network], None], seconds: float) -> None:
    """The rules in place for ``seconds``, then healed."""
    with applied(stack, apply) as network:
        saga.echo("; ".join(_describe(network)) + f" for {seconds:.0f} s")
        time.sleep(seconds)


def _describe(network: Network) -> list[str]:
    return [rule_of(raw).describe() for raw in network.rules]


# -- the groups of nodes a fault separates ---------------------------------------------------
def brokers(stack: Stack) -> list[str]:
    return [node.name for node in stack.state.broker.nodes]


def consumers(stack: Stack) -> list[str]:
    """Where the consumers run: the driver and, on a Spark cluster, the workers (their
    executors run the jobs' tasks, and commit the inbox's transactions)."""
    from outboxkit_workshop.devstack import faults as nodes

    return ["consumers", *(node.name for node in nodes.spark_workers(stack))]


def _others(names: Sequence[str], one: str) -> list[str]:
    return [name for name in names if name != one]


# -- the strikes ----------------------------------------------------------------------------
def isolate_leader(stack: Stack, saga: Saga, rng: random.Random) -> str:
    """The leader of a random saga topic partition cut from the other brokers (both ways),
    still reachable by every client: it cannot replicate, the quorum fences it, and a
    follower in sync takes over; its clients must move."""
    from outboxkit_workshop.devstack import faults as nodes

    topic = rng.choice(saga_topics(stack))
    partition = rng.randrange(nodes.partitions(stack, topic))
    leader = nodes.partition_leader(stack, topic, partition).name
    saga.echo(f"{leader} leads {topic}[{partition}]")
    others = _others(brokers(stack), leader)
    hold(stack, saga, lambda net: net.cut([leader], others), rng.uniform(*CUT_SECONDS))
    return leader


def isolate_controller(stack: Stack, saga: Saga, rng: random.Random) -> str:
    """The active controller cut from the other brokers (both ways): the others elect a new
    controller; the old one, alone, must not act as one."""
    from outboxkit_workshop.devstack import faults as nodes

    controller = nodes.active_controller(stack).name
    others = _others(brokers(stack), controller)
    hold(stack, saga, lambda net: net.cut([controller], others), rng.uniform(*CUT_SECONDS))
    return controller


def cut_connect_from_kafka(stack: Stack, saga: Saga, rng: random.Random) -> str:
    """The Connect worker running a saga connector's task cut from every broker, not from
    Postgres: its task keeps reading the WAL but cannot commit its transactions; the group
    moves the task to another worker, whose producer fences the cut one's."""
    from outboxkit_workshop.devstack import faults as nodes

    connector = rng.choice(saga_connectors(stack, saga))
    worker = nodes.task_worker(stack, connector).name
    saga.echo(f"{worker} runs {connector}'s task")
    hold(stack, saga, lambda net: net.cut([worker], brokers(stack)), rng.uniform(*CUT_SECONDS))
    return worker


def split_connect_workers(stack: Stack, saga: Saga, rng: random.Random) -> str:
    """A Connect worker cut from the other workers only (both reach Kafka and Postgres): REST
    calls a follower forwards to the leader fail; the group, coordinated by Kafka, lives on."""
    workers = [node.name for node in stack.state.connect.nodes]
    worker = rng.choice(workers)
    others = _others(workers, worker)
    hold(stack, saga, lambda net: net.cut([worker], others), rng.uniform(*CUT_SECONDS))
    return worker


def in_doubt_commit(stack: Stack, saga: Saga, rng: random.Random) -> str:
    """The consumers' answers from Postgres cut (one way: their statements still arrive),
    then their connections ended on the server: a COMMIT sent in that time is applied, and
    its client only sees its connection fail, never the answer. The job must fail the batch
    and, replayed, apply nothing twice. Reports how many connections had just committed."""
    group = consumers(stack)
    network = network_of(stack)
    addresses = [address_of(network.as_dict(), name) for name in group]
    seconds = rng.uniform(3, 8)
    engine = engine_for(stack.database_url(), "once")
    try:
        with applied(stack, lambda net: net.cut(["postgres"], group, oneway=True)):
            with engine.connect() as conn:
                cut_at = conn.execute(text("SELECT clock_timestamp()")).scalar_one()
            time.sleep(seconds)
            committed = _end_connections(engine, addresses, cut_at)
    finally:
        engine.dispose()
    saga.echo(
        f"postgres -> consumers cut for {seconds:.0f} s; {committed} connection(s) ended "
        "right after a COMMIT whose answer never came"
    )
    return f"consumers ({committed} in doubt)"


def _end_connections(engine: Engine, addresses: Sequence[str], cut_at: Any) -> int:
    """End every connection from ``addresses`` on the server; returns how many committed
    while the cut was on: idle after a COMMIT that ran since ``cut_at``, so its answer is what
    was lost (a connection idle since a COMMIT before the cut had its answer)."""
    with engine.begin() as conn:
        rows = conn.execute(
            text(
                "SELECT pid, state, query, state_change >= :cut_at AS since_cut "
                "FROM pg_stat_activity WHERE host(client_addr) = ANY(:addresses)"
            ),
            {"addresses": list(addresses), "cut_at": cut_at},
        ).all()
        for row in rows:
            conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": row.pid})
    return sum(
        1
        for row in rows
        if row.state == "idle" and row.since_cut and row.query.strip().upper() == "COMMIT"
    )


def cut_service_from_postgres(stack: Stack, saga: Saga, rng: random.Random) -> str:
    """One service replica cut from Postgres (both ways): it must answer 503 (not ready), and
    its clients use another replica or retry; what it wrote before is relayed as usual."""

    replica = pick(saga.replicas_of(rng.choice(SERVICES)), rng)
    hold(stack, saga, lambda net: net.cut([replica], ["postgres"]), rng.uniform(*CUT_SECONDS))
    return replica


def slow_consumer_links(stack: Stack, saga: Saga, rng: random.Random) -> str:
    """200 ms ± 50 ms each way and 1% of packets lost between the consumers and Kafka."""
    group = consumers(stack)
    hold(
        stack,
        saga,
        lambda net: net.slow(
            group, brokers(stack), delay=SLOW_DELAY, jitter=SLOW_JITTER, loss=SLOW_LOSS
        ),
        rng.uniform(*SLOW_SECONDS),
    )
    return "+".join(group)


def deafen_leader(stack: Stack, saga: Saga, rng: random.Random) -> str:
    """One way: the leader of a random saga partition hears nothing from the other brokers,
    which still hear it (its followers' fetches and the controller's answers are lost): the
    in-sync set shrinks, and the leader, its heartbeats unanswered, is fenced."""
    from outboxkit_workshop.devstack import faults as nodes

    topic = rng.choice(saga_topics(stack))
    partition = rng.randrange(nodes.partitions(stack, topic))
    leader = nodes.partition_leader(stack, topic, partition).name
    saga.echo(f"{leader} leads {topic}[{partition}]")
    others = _others(brokers(stack), leader)

    def deafen(net: Network) -> None:
        net.cut(others, [leader], oneway=True)

    hold(stack, saga, deafen, rng.uniform(*CUT_SECONDS))
    return leader


STRIKES = {
    "leader-isolated": isolate_leader,
    "controller-isolated": isolate_controller,
    "connect-kafka-cut": cut_connect_from_kafka,
    "connect-workers-split": split_connect_workers,
    "commit-in-doubt": in_doubt_commit,
    "service-postgres-cut": cut_service_from_postgres,
    "consumer-kafka-slow": slow_consumer_links,
    "leader-deaf": deafen_leader,
}
