"""An outbox row whose Kafka record is too large (written around `publish`) fails the connector
task for good. `stack status` and `cdc preflight` say why and give the way out; following it
delivers that event and every event after it exactly once, in order; then the limits go back."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType
from sqlalchemy import create_engine, pool, text

from cdc.config import topic_for
from cdc.limits import BROKER_MESSAGE_MAX_BYTES
from cdc.recovery import PRODUCER_OVERRIDE
from outboxkit.kernel.wire.record import header_map
from outboxkit_workshop.devstack.settings import StackSettings
from outboxkit_workshop.devstack.stack import Stack
from tests.kafka import read_records

BIG_HEADER = 1_200_000  # bytes of one header value: over max.request.size (1,048,576)
INSERT = text(
    "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, headers) "
    "VALUES (:id, :aggregate_type, 'k', :type, CAST(:payload AS jsonb), CAST(:headers AS jsonb))"
)


def own_connector(
    stack: Stack, database: str, folder: Path, kind: str, topic_prefix: str | None = None
) -> Iterator[Stack]:
    """A connector of a test's own (slot, publication, server name ``<kind>_<tag>``) on its own
    ``database``, registered on the session's Connect, routing to ``topic_prefix`` (None: one
    of its own); deleted, its slot and publication dropped afterwards."""
    tag = uuid.uuid4().hex[:6]
    own = Stack(
        StackSettings(
            database_url=database,
            secrets_dir=stack.secrets.dir,
            kafka_bootstrap_servers=stack.bootstrap_servers(),
            connect_url=stack.state.connect.endpoint,
            stack_dir=folder,
            connector_name=f"it-{kind}-{tag}",
            server_name=f"{kind}_{tag}",
            slot_name=f"it_{kind}_{tag}",
            publication_name=f"it_{kind}_{tag}",
            topic_prefix=topic_prefix or f"{kind}.{tag}.",
            heartbeat_interval_ms=2000,
        ),
        echo=print,
    )
    own.up()
    yield own
    own.down()


@pytest.fixture
def service(stack: Stack, empty_database: str, tmp_path: Path) -> Iterator[Stack]:
    """Its own connector (slot, publication, server name, topic prefix) on its own database."""
    yield from own_connector(stack, empty_database, tmp_path / "stack", "large")


def insert(url: str, aggregate_type: str, events: list[tuple[str, int, int]]) -> list[str]:
    """One transaction per (type, n, header bytes) event, straight into the outbox table."""
    engine = create_engine(url, poolclass=pool.NullPool)
    ids = []
    for event_type, n, header_bytes in events:
        ids.append(str(uuid.uuid4()))
        headers = json.dumps({"blob": "x" * header_bytes}) if header_bytes else None
        row = {"id": ids[-1], "aggregate_type": aggregate_type, "type": event_type}
        with engine.begin() as conn:
            conn.execute(INSERT, {**row, "payload": json.dumps({"n": n}), "headers": headers})
    engine.dispose()
    return ids


def outboxkit(service: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    """The `outboxkit` command on the service's stack directory and connector."""
    s = service.settings
    env = {
        **os.environ,
        "OUTBOXKIT_STACK_DIR": str(service.dir),
        "OUTBOXKIT_CONNECTOR_NAME": s.connector_name,
        "OUTBOXKIT_SLOT_NAME": s.slot_name,
        "OUTBOXKIT_PUBLICATION_NAME": s.publication_name,
    }
    argv = [sys.executable, "-m", "outboxkit.cli", *args]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)


def wait_failed(service: Stack, timeout: float = 90.0) -> str:
    client = service.connect_client()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = client.status(service.settings.connector_name)
        if status is not None and status.failure:
            return status.failure
        time.sleep(0.5)
    raise TimeoutError(f"the connector's task did not fail within {timeout:.0f}s")


def topic_limit(bootstrap: str, topic: str) -> tuple[str, bool]:
    """The topic's max.message.bytes and whether the topic overrides the broker's."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entry = admin.describe_configs([resource])[resource].result(timeout=30)["max.message.bytes"]
    return entry.value, entry.source == 1  # ConfigSource.DYNAMIC_TOPIC_CONFIG


def command(way_out: list[str], verb: str) -> list[str]:
    """The `outboxkit cdc VERB ...` arguments a way-out step names."""
    found = re.search(rf"outboxkit (cdc {verb}[^;\n]*)", "\n".join(way_out))
    assert found, f"no `outboxkit cdc {verb}` in the way out:\n" + "\n".join(way_out)
    return found[1].split()


def test_too_large_record_fails_the_task_and_the_way_out_delivers_every_event_once(
    service: Stack,
) -> None:
    s, url, bootstrap = service.settings, service.database_url(), service.bootstrap_servers()
    name, aggregate_type = s.connector_name, f"big_{uuid.uuid4().hex[:8]}"
    topic = topic_for(aggregate_type, topic_prefix=s.topic_prefix)
    events = [("Before", 0, 0), ("Big", 1, BIG_HEADER), *(("After", n, 0) for n in range(2, 7))]
    ids = insert(url, aggregate_type, events)
    assert "RecordTooLargeException" in wait_failed(service)

    # `stack status --json`: FAILED (Connect itself says the connector RUNS), why, the way out.
    report = json.loads(outboxkit(service, "dev", "stack", "status", "--json").stdout)
    assert report["connectors"][name] == "FAILED"
    assert report["slots"][s.slot_name]["active"] is False  # the slot holds WAL meanwhile
    failure = report["failures"][name]
    assert failure["task"] == 0
    assert re.search(r"RecordTooLargeException: The message is \d+ bytes", failure["cause"])
    assert failure["record"]["event_id"] == ids[1] and failure["record"]["topic"] == topic
    assert failure["record"]["record_bytes"] > BIG_HEADER
    raise_limit = command(failure["way_out"], "raise-limit")
    assert raise_limit[:6] == ["cdc", "raise-limit", "--connector", name, "--topic", topic]
    restore_limit = command(failure["way_out"], "restore-limit")
    assert "onlyFailed=true" in "\n".join(failure["way_out"])

    # The same in text, and from the operator's preflight (which then fails).
    status = outboxkit(service, "dev", "stack", "status")
    assert status.returncode == 1  # a failed connector fails the status check
    assert f"connector {name}: task 0 FAILED" in status.stdout and "way out:" in status.stdout
    preflight = outboxkit(service, "cdc", "preflight")
    assert preflight.returncode == 1, preflight.stdout + preflight.stderr
    assert f"[FAIL] connector {name}: task 0 FAILED" in preflight.stdout
    assert "RecordTooLargeException" in preflight.stdout and "raise-limit" in preflight.stdout

    # The way out, as printed: raise the limits and restart the failed task.
    raised = outboxkit(service, *raise_limit)
    assert raised.returncode == 0, raised.stdout + raised.stderr
    assert topic_limit(bootstrap, topic) == (raise_limit[-1], True)
    records = read_records(bootstrap, [topic], until=lambda got: len(got) >= len(ids), timeout=120)
    assert [header_map(r.headers)["id"] for r in records] == ids  # once each, in order
    assert [json.loads(r.value or b"")["n"] for r in records] == list(range(7))
    assert len(header_map(records[1].headers)["headers"]) > BIG_HEADER

    # Then back to the cluster's limits; later events still flow, the big one is not re-sent.
    restored = outboxkit(service, *restore_limit)
    assert restored.returncode == 0, restored.stdout + restored.stderr
    assert topic_limit(bootstrap, topic) == (str(BROKER_MESSAGE_MAX_BYTES), False)
    config = service.connect_client().get_config(name)
    assert config is not None and PRODUCER_OVERRIDE not in config
    ids += insert(url, aggregate_type, [("Later", 7, 0)])
    records = read_records(bootstrap, [topic], until=lambda got: len(got) >= len(ids), timeout=90)
    assert [header_map(r.headers)["id"] for r in records] == ids
    preflight = outboxkit(service, "cdc", "preflight", "--expect-slot")
    assert preflight.returncode == 0, preflight.stdout
    assert f"[ok] connector {name}: RUNNING" in preflight.stdout
