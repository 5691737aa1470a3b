"""The connector supervisor on the real Kafka Connect: a task FAILED by a cause that then passes
is restarted by it and runs; a cause that stays is restarted within its budget only."""

from __future__ import annotations

import re
import time
import uuid

import pytest
from sqlalchemy import text

from cdc.config import build_connector_config
from cdc.connect import ConnectError
from cdc.preflight import drop_slot
from cdc.supervisor import RestartPolicy, Supervisor, wait_running


def _wait_failed(client, name: str, timeout: float = 90.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = client.status(name)
        if status is not None and status.failure:
            return status
        time.sleep(0.5)
    raise AssertionError(f"{name} never FAILED: {client.status(name)}")


def _slot_exists(conn, slot: str) -> bool:
    query = text("SELECT 1 FROM pg_replication_slots WHERE slot_name = :s")
    return conn.execute(query, {"s": slot}).first() is not None


def test_a_task_failed_by_a_passing_cause_is_restarted_and_runs(stack, engine):
    client = stack.connect_client()
    suffix = uuid.uuid4().hex[:8]
    name, slot, publication = f"sup-{suffix}", f"sup_{suffix}", f"sup_{suffix}"
    config = build_connector_config(stack.connector_settings(stack.database_url()))
    # The task fails at start: its publication is missing and it may not create one.
    config.update(
        {
            "publication.name": publication,
            "slot.name": slot,
            "publication.autocreate.mode": "disabled",
            "topic.prefix": f"sup{suffix}",
        }
    )
    client.put_config(name, config)
    lines: list[str] = []
    try:
        _wait_failed(client, name)
        # While the cause stays, the restarts fail again and the budget runs out.
        policy = RestartPolicy(first_delay=2.0, max_restarts=2)
        with pytest.raises(ConnectError, match=r"(?s)gave up.*Publication autocreation"):
            wait_running(client, name, timeout=60, policy=policy, echo=lines.append)
        assert sum("restarted its failed tasks" in line for line in lines) == 2
        # The cause passes (the publication is created); the supervisor's next restart runs.
        with engine.begin() as conn:
            conn.execute(text(f"CREATE PUBLICATION {publication} FOR TABLE outbox"))
        supervisor = Supervisor(client, RestartPolicy(first_delay=2.0), echo=lines.append)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            supervisor.check([name])
            status = client.status(name)
            if status is not None and status.running:
                break
            time.sleep(1)
        assert status is not None and status.running, status
        assert re.search(r"restarted its failed tasks \(\d+/10\)", lines[-1]), lines
    finally:
        client.delete(name)
        with engine.begin() as conn:
            deadline = time.monotonic() + 15  # the walsender may take a moment to let it go
            while _slot_exists(conn, slot) and time.monotonic() < deadline:
                drop_slot(conn, slot) or time.sleep(0.5)
            conn.execute(text(f"DROP PUBLICATION IF EXISTS {publication}"))
