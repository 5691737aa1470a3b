"""The stack runner: idempotent `up`, `status --json`, external components, slot clean-up."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from sqlalchemy import text

from outboxkit_workshop.devstack.artifacts import pinned_versions
from outboxkit_workshop.devstack.processes import alive
from outboxkit_workshop.devstack.settings import StackSettings
from outboxkit_workshop.devstack.stack import Stack
from tests.kafka import read_records


def test_up_again_is_safe_and_keeps_the_same_processes(stack):
    before = stack.state
    stack.up()
    after = stack.state
    for name in ("postgres", "broker", "connect"):
        assert getattr(after, name).pid == getattr(before, name).pid
        assert getattr(after, name).endpoint == getattr(before, name).endpoint


def test_status_json_reports_every_component(stack):
    env = {**os.environ, "OUTBOXKIT_STACK_DIR": str(stack.dir)}
    out = subprocess.run(
        [sys.executable, "-m", "outboxkit.cli", "dev", "stack", "status", "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    report = json.loads(out)
    assert report["up"] is True
    assert report["database_url"] == stack.database_url()
    assert report["bootstrap_servers"] == stack.bootstrap_servers()
    for name in ("postgres", "broker", "connect"):
        assert report[name]["mode"] == "embedded" and report[name]["running"] is True
    assert report["connectors"][stack.settings.connector_name] == "RUNNING"
    assert report["slots"][stack.settings.slot_name]["active"] is True
    pins = pinned_versions()
    assert report["broker"]["product"] == {"name": "Apache Kafka", "version": pins.kafka}
    connect = report["connect"]["product"]
    assert connect["version"] == pins.kafka and connect["debezium"] == pins.debezium
    assert connect["exactly_once_source"] is True
    # The worker really runs KIP-618: the connector was accepted with exactly-once required.
    config = stack.connect_client().get_config(stack.settings.connector_name)
    assert config is not None and config["exactly.once.support"] == "required"


@pytest.mark.slow  # the dev stack's own restart path; the full run takes it
def test_broker_keeps_its_data_across_down_keep_data_and_up():
    # The postgres user must be able to enter the directory: not under pytest's 0700 tmp.
    base = Path(tempfile.mkdtemp(prefix="outboxkit-kept-"))
    base.chmod(0o755)
    suffix = uuid.uuid4().hex[:6]
    kept = Stack(
        StackSettings(
            stack_dir=base / "stack",
            connector_name=f"kept-{suffix}",
            slot_name=f"kept_{suffix}",
            publication_name=f"kept_{suffix}",
        ),
        echo=print,
    )
    topic = f"kept-{suffix}"
    try:
        kept.up()
        producer = Producer({"bootstrap.servers": kept.bootstrap_servers()})
        for n in range(10):
            producer.produce(topic, key=b"k", value=str(n).encode())
        assert producer.flush(30) == 0
        kept.down(keep_data=True)
        kept.up()
        records = read_records(
            kept.bootstrap_servers(), [topic], until=lambda got: len(got) >= 10, timeout=60
        )
        assert [r.value for r in records] == [str(n).encode() for n in range(10)]
    finally:
        kept.down()
        shutil.rmtree(base, ignore_errors=True)


def test_external_components_are_not_started_and_down_drops_their_slot(stack, engine, tmp_path):
    suffix = uuid.uuid4().hex[:6]
    external = Stack(
        StackSettings(
            database_url=stack.database_url(),
            secrets_dir=stack.secrets.dir,
            kafka_bootstrap_servers=stack.bootstrap_servers(),
            connect_url=stack.state.connect.endpoint,
            stack_dir=tmp_path / "external",
            connector_name=f"ext-{suffix}",
            slot_name=f"ext_{suffix}",
            publication_name=f"ext_{suffix}",
        ),
        echo=print,
    )
    state = external.up()
    assert {state.postgres.mode, state.broker.mode, state.connect.mode} == {"external"}
    assert state.postgres.pid is None and state.connect.pid is None
    client = stack.connect_client()
    assert client.wait_running(f"ext-{suffix}", timeout=60).running
    with engine.connect() as conn:
        slots = {r[0] for r in conn.execute(text("SELECT slot_name FROM pg_replication_slots"))}
    assert f"ext_{suffix}" in slots
    external.down()
    assert client.status(f"ext-{suffix}") is None
    with engine.connect() as conn:
        slots = {r[0] for r in conn.execute(text("SELECT slot_name FROM pg_replication_slots"))}
    assert f"ext_{suffix}" not in slots
    with engine.connect() as conn:
        pubs = {r[0] for r in conn.execute(text("SELECT pubname FROM pg_publication"))}
    assert f"ext_{suffix}" not in pubs and stack.settings.publication_name in pubs
    # The embedded services the external stack pointed at are untouched.
    assert all(alive(getattr(stack.state, n).pid) for n in ("postgres", "broker", "connect"))
    assert client.status(stack.settings.connector_name).running
