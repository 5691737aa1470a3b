"""The Connect worker running the connector's task lost while outbox events stream, on a group
of two workers with exactly-once source (KIP-618): the task moves to the other worker in
seconds, and its producer fences the old one's transactional id, so a read_committed consumer
sees every event, none twice but for what Debezium may re-emit on resuming
(`tests.streaming.RESUME_RESENDS`), even when the old worker was only paused and comes back."""

from __future__ import annotations

import time

import pytest

from outboxkit_workshop.devstack import faults
from outboxkit_workshop.devstack.state import Node
from tests.streaming import CLUSTER_EVENTS as EVENTS
from tests.streaming import check_counts, stream_with_faults


def test_task_moves_when_its_worker_is_killed_and_nothing_is_lost(
    cluster, cluster_engine, aggregate_type
):
    connector = cluster.settings.connector_name
    moves: list[tuple[str, str, float]] = []

    def kill_task_worker(written: int) -> None:
        node = faults.task_worker(cluster, connector)
        faults.kill(node)
        print(f"killed {node.name} (pid {node.pid}), running the task, at {written} written")
        moved_to, seconds = faults.wait_task_moved(cluster, connector, node)
        moves.append((node.name, moved_to.name, seconds))
        print(f"task moved {node.name} -> {moved_to.name} in {seconds:.1f}s")
        cluster.up()  # the old worker starts again and rejoins the group

    counts = stream_with_faults(
        cluster, cluster_engine, aggregate_type, events=EVENTS, points=[0.3], fault=kill_task_worker
    )
    print(f"moves {moves}")
    check_counts(counts, EVENTS)
    assert len(moves) == 1 and moves[0][0] != moves[0][1]
    assert all(n["health"] == "up" for n in cluster.status()["nodes"])


def test_a_paused_worker_that_comes_back_is_fenced(cluster, cluster_engine, aggregate_type):
    """SIGSTOP of the worker running the task: the group drops it and the task starts on the
    other worker while the old one still lives, holding an open transaction. On SIGCONT the
    old task's producer finds itself fenced, and nothing it had in flight becomes visible."""
    connector = cluster.settings.connector_name
    paused: list[Node] = []

    def pause_task_worker(written: int) -> None:
        node = faults.task_worker(cluster, connector)
        faults.pause(node)
        paused.append(node)
        print(f"paused {node.name} (pid {node.pid}), running the task, at {written} written")
        try:
            moved_to, seconds = faults.wait_task_moved(cluster, connector, node, timeout=180)
            print(f"task moved {node.name} -> {moved_to.name} in {seconds:.1f}s")
        finally:
            faults.resume(node)
        time.sleep(5)

    counts = stream_with_faults(
        cluster,
        cluster_engine,
        aggregate_type,
        events=EVENTS,
        points=[0.3],
        fault=pause_task_worker,
    )
    check_counts(counts, EVENTS)
    cluster.up()  # whatever the old worker did on waking, the group is whole again
    assert cluster.connect_client().wait_running(connector, timeout=120).running


pytestmark = pytest.mark.cluster
