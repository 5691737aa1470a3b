"""The connector supervisor's decisions: when a FAILED task is restarted, when it is left alone."""

from __future__ import annotations

import dataclasses
import threading

import pytest

from cdc.connect import ConnectError, ConnectorStatus, parse_status
from cdc.supervisor import RestartPolicy, Supervisor, wait_running

# Connect 4.3's trace when the transaction coordinator was killed mid-commit (trimmed).
COORDINATOR_LOST = (
    "org.apache.kafka.connect.errors.ConnectException: Failed to flush offsets and/or records "
    "for task orders-outbox-0\n"
    "\tat org.apache.kafka.connect.runtime.ExactlyOnceWorkerSourceTask.commitTransaction("
    "ExactlyOnceWorkerSourceTask.java:331)\n"
    "Caused by: org.apache.kafka.common.errors.OperationNotAttemptedException: The broker did "
    "not attempt to execute this operation.\n"
)
TOO_LARGE = (
    "org.apache.kafka.connect.errors.ConnectException: Unrecoverable exception trying to send\n"
    "Caused by: org.apache.kafka.common.errors.RecordTooLargeException: The message is 1200220 "
    "bytes when serialized which is larger than 1048576\n"
)


def status(trace: str | None = None, state: str = "FAILED", name: str = "c") -> ConnectorStatus:
    task = {"id": 0, "state": state, "worker_id": "w", **({"trace": trace} if trace else {})}
    if trace is None and state == "FAILED":
        task["state"] = "RUNNING"
    return parse_status({"name": name, "connector": {"state": "RUNNING"}, "tasks": [task]})


RUNNING = status(state="RUNNING")
FAILED = status(COORDINATOR_LOST)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeConnect:
    """Connect's REST API as the supervisor uses it: statuses played in turn, restarts kept."""

    url = "http://connect:8083"

    def __init__(self, statuses: list[ConnectorStatus | None] | None = None) -> None:
        self.statuses = list(statuses or [])
        self.restarts: list[tuple[str, bool]] = []

    def status(self, name: str) -> ConnectorStatus | None:
        now = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
        return None if now is None else dataclasses.replace(now, name=name)

    def connectors(self) -> list[str]:
        return ["a", "b"]

    def restart(self, name: str, *, only_failed: bool = False) -> None:
        self.restarts.append((name, only_failed))


def supervisor(policy: RestartPolicy | None = None) -> tuple[Supervisor, FakeConnect, Clock]:
    client, clock, lines = FakeConnect(), Clock(), []
    sup = Supervisor(client, policy or RestartPolicy(), echo=lines.append, clock=clock)  # type: ignore[arg-type]
    return sup, client, clock


def test_delays_double_from_the_first_to_the_cap():
    policy = RestartPolicy(first_delay=15, max_delay=100)
    assert [policy.delay(n) for n in range(6)] == [0, 15, 30, 60, 100, 100]


def test_a_failed_task_is_restarted_at_once_only_its_failed_tasks():
    sup, client, _ = supervisor()
    assert sup.observe(FAILED) == "restarted"
    assert client.restarts == [("c", True)]


def test_later_restarts_wait_a_doubling_delay():
    sup, client, clock = supervisor(RestartPolicy(first_delay=10, max_restarts=5))
    times = []
    for second in range(0, 80):
        clock.now = float(second)
        if sup.observe(FAILED) == "restarted":
            times.append(second)
    assert times == [0, 10, 30, 70]
    assert len(client.restarts) == 4


def test_it_gives_up_after_max_restarts_in_a_row_but_only_once_the_last_had_its_delay():
    sup, client, clock = supervisor(RestartPolicy(first_delay=10, max_restarts=2))
    assert sup.observe(FAILED) == "restarted"  # t=0
    clock.now = 10
    assert sup.observe(FAILED) == "restarted"
    clock.now = 20  # the second restart's status may not be in yet
    assert sup.observe(FAILED) is None
    clock.now = 30
    assert sup.observe(FAILED) == "gave up"
    assert len(client.restarts) == 2


def test_a_connector_that_ran_long_enough_starts_again_from_the_first_delay():
    sup, client, clock = supervisor(RestartPolicy(first_delay=10, stable_after=60))
    sup.observe(FAILED)
    clock.now = 10
    sup.observe(FAILED)  # 2 restarts in a row: the next waits 20 s, until t=30
    clock.now = 11
    sup.observe(RUNNING)
    clock.now = 29  # ran 18 s only: the count stands
    sup.observe(RUNNING)
    assert sup.observe(FAILED) is None
    clock.now = 40
    sup.observe(RUNNING)
    clock.now = 100  # ran 60 s since 40: the count starts again
    sup.observe(RUNNING)
    assert sup.observe(FAILED) == "restarted"  # at once
    clock.now = 101
    assert sup.observe(FAILED) is None  # the next one 10 s on, not 40
    clock.now = 110
    assert sup.observe(FAILED) == "restarted"
    assert len(client.restarts) == 4


def test_a_record_too_large_is_left_failed_for_the_operator():
    sup, client, _ = supervisor()
    assert sup.observe(status(TOO_LARGE)) == "left: record too large"
    assert client.restarts == []


def test_a_running_or_starting_connector_is_not_touched():
    sup, client, _ = supervisor()
    assert sup.observe(RUNNING) is None
    assert sup.observe(status(state="UNASSIGNED")) is None
    assert client.restarts == []


def test_each_connector_has_its_own_count():
    sup, client, _ = supervisor()
    assert sup.observe(status(COORDINATOR_LOST, name="a")) == "restarted"
    assert sup.observe(status(COORDINATOR_LOST, name="b")) == "restarted"
    assert sup.observe(status(COORDINATOR_LOST, name="a")) is None  # a's second waits
    assert [name for name, _ in client.restarts] == ["a", "b"]


def test_wait_running_restarts_a_passing_failure_and_returns_once_running():
    client = FakeConnect([None, FAILED, FAILED, RUNNING])
    lines: list[str] = []
    got = wait_running(client, "c", timeout=5, echo=lines.append, poll=0)  # type: ignore[arg-type]
    assert got.running
    assert client.restarts == [("c", True)]
    assert "OperationNotAttemptedException" in lines[0]


def test_wait_running_raises_with_the_trace_when_a_restart_cannot_mend_it():
    client = FakeConnect([status(TOO_LARGE)])
    with pytest.raises(ConnectError, match=r"(?s)record too large.*RecordTooLargeException"):
        wait_running(client, "c", timeout=5, poll=0)  # type: ignore[arg-type]
    assert client.restarts == []


def test_a_pass_without_names_watches_every_connector_of_the_cluster(tmp_path):
    client = FakeConnect([FAILED])
    sup = Supervisor(client, echo=lambda _: None)  # type: ignore[arg-type]
    assert sup.check() == {"a": "restarted", "b": "restarted"}
    stop = threading.Event()
    alive = tmp_path / "alive"
    client.connectors = lambda: stop.set() or ["a"]  # type: ignore[method-assign]
    sup.run(interval=0, stop=stop, alive_file=alive)  # one pass, then stop
    assert alive.exists()
