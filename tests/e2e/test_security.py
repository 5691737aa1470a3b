"""The running saga as a security reviewer reads it: which roles its processes log in as, and
where its passwords could leak (Connect's REST API and config topic, the state file, every log,
the CLI's output)."""

from __future__ import annotations

import contextlib
import io
import threading
import uuid
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from outboxkit_workshop.saga.common import SERVICES

ACTIVITY = text(
    "SELECT a.usename, r.rolsuper, a.backend_type FROM pg_stat_activity a"
    " JOIN pg_roles r ON r.oid = a.usesysid"
    " WHERE a.pid <> pg_backend_pid() AND a.datname = ANY(:databases)"
    " AND a.backend_type IN ('client backend', 'walsender')"
)


def test_the_running_saga_never_connects_as_a_superuser(saga, stack):
    """While orders flow, every connection to the service databases (services, Spark sinks,
    Connect's queries and replication) is a service's own role or the CDC role."""
    databases = [saga._database(s) for s in SERVICES]
    seen: set[tuple[str, bool, str]] = set()
    done = threading.Event()

    def sample() -> None:
        # The sampler needs pg_read_all_stats to see other roles' sessions: it is the test's
        # superuser session, in the maintenance database, so it is not among those it samples.
        admin = create_engine(make_url(stack.database_url()).set(database="postgres"))
        with admin.connect() as conn:
            while not done.is_set():
                seen.update(tuple(r) for r in conn.execute(ACTIVITY, {"databases": databases}))
                conn.rollback()
                done.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        placed = saga.place_orders(60, seed=23, rate=20)
        assert saga.wait_final(placed, timeout=300) == []
    finally:
        done.set()
        sampler.join(10)
    assert [s for s in seen if s[1]] == [], "superuser sessions during the run"
    users = {user for user, _, _ in seen}
    assert users == {*databases, stack.settings.cdc_role}
    assert (stack.settings.cdc_role, False, "walsender") in seen


def _config_topic(stack) -> str:  # type: ignore[no-untyped-def]
    return f"_{stack.settings.connector_name}-connect-configs"


def _read_all(bootstrap: str, topic: str) -> bytes:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"it-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
        }
    )
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, 0)])
        chunks: list[bytes] = []
        read = 0
        while read < high:
            msg = consumer.poll(5)
            if msg is None:
                break
            if msg.error() is None:
                read = msg.offset() + 1
                chunks.append(msg.value() or b"")
        return b"\n".join(chunks)
    finally:
        consumer.close()


def test_no_password_appears_in_connect_state_logs_or_cli_output(saga, stack, monkeypatch):
    from outboxkit.cli import main

    passwords = {role: stack.secrets.password(role) for role in stack.secrets.roles()}
    assert {*SERVICES, "postgres", stack.settings.cdc_role} <= {
        r.removeprefix(saga.database_prefix) for r in passwords
    }
    for role in passwords:
        assert stack.secrets.file(role).stat().st_mode & 0o077 == 0, role
    places: dict[str, bytes] = {}
    client = stack.connect_client()
    for name in stack.state.connectors:
        config = client.get_config(name)
        assert config is not None
        assert config["database.user"] == stack.settings.cdc_role
        assert config["database.password"].startswith("${dir:")  # a reference, resolved by Connect
        places[f"Connect REST config of {name}"] = repr(config).encode()
    places["Connect's config topic"] = _read_all(stack.bootstrap_servers(), _config_topic(stack))
    assert stack.settings.cdc_role.encode() in places["Connect's config topic"]
    places["state file"] = stack.state_file.read_bytes()
    for path in [*stack.logs.rglob("*"), *saga.workdir.rglob("*"), *stack.dir.glob("*/*.prop*")]:
        if path.is_file():
            places[str(path)] = path.read_bytes()
    monkeypatch.setenv("OUTBOXKIT_STACK_DIR", str(stack.dir))
    for argv in (
        ["dev", "stack", "status", "--json"],
        ["dev", "saga", "status", "--json"],
        ["dev", "stack", "status"],
    ):
        output = io.StringIO()
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            main(argv)
        places[f"outboxkit {' '.join(argv)}"] = output.getvalue().encode()
    assert any("connect.log" in p for p in places) and any(p.endswith(".log") for p in places)
    leaks = [
        f"{role}'s password in {place}"
        for place, content in places.items()
        for role, password in passwords.items()
        if password.encode() in content
    ]
    assert leaks == []
    assert Path(stack.pgpass).stat().st_mode & 0o077 == 0
