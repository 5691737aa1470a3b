"""Endpoint resolution for the operator commands: settings first, then the dev stack's state
file, each endpoint on its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc.endpoints import EndpointError
from outboxkit.endpoints import resolve
from outboxkit.settings import Settings
from outboxkit_workshop.devstack.state import EMBEDDED, Component, Node, StackState


def record(stack_dir) -> None:
    StackState(
        postgres=Component(EMBEDDED, "postgresql+psycopg://postgres@127.0.0.1:5999/outboxkit"),
        broker=Component(EMBEDDED, "127.0.0.1:9999"),
        connect=Component(
            EMBEDDED,
            "http://127.0.0.1:8083",
            [Node("connect-1", pid=None, endpoint="http://127.0.0.1:8083")],
        ),
    ).save(stack_dir / "state.json")


def test_the_state_file_gives_what_the_settings_leave_unset(tmp_path):
    record(tmp_path)
    settings = Settings(_env_file=None, stack_dir=tmp_path, kafka_bootstrap_servers="kafka:9092")
    found = resolve(settings)
    assert str(found.database_url()) == "postgresql+psycopg://postgres@127.0.0.1:5999/outboxkit"
    assert found.bootstrap_servers == "kafka:9092"
    assert found.connect_url == "http://127.0.0.1:8083"
    assert found.source == {
        "database": str(tmp_path / "state.json"),
        "kafka": "settings",
        "connect": str(tmp_path / "state.json"),
    }


def test_settings_alone_need_no_state_file_and_keep_the_password_out_of_sight(tmp_path):
    secret = tmp_path / "db.password"
    secret.write_text("s3cret\n")
    settings = Settings(
        _env_file=None,
        stack_dir=tmp_path / "absent",
        database_url="postgresql+psycopg://ops@db.internal/orders",
        database_password_file=secret,
        connect_url="https://connect.internal",
        connect_user="ops",
        connect_password_file=secret,
    )
    found = resolve(settings)
    url = found.database_url()
    assert not isinstance(url, str) and url.password == "s3cret"
    assert "s3cret" not in str(url) and "s3cret" not in repr(found)
    assert found.connect().url == "https://connect.internal"
    assert found.bootstrap_servers is None and "kafka" not in found.source
    with pytest.raises(EndpointError, match="no Kafka: set OUTBOXKIT_KAFKA_BOOTSTRAP_SERVERS"):
        found.kafka()


def test_nothing_anywhere_is_a_clear_error_and_a_url_given_wins(tmp_path):
    found = resolve(Settings(_env_file=None, stack_dir=tmp_path))
    with pytest.raises(EndpointError, match="no database: set OUTBOXKIT_DATABASE_URL"):
        found.database_url()
    with pytest.raises(EndpointError, match="no Kafka Connect"):
        found.connect()
    assert found.database_url("postgresql+psycopg://x@h/d") == "postgresql+psycopg://x@h/d"


def test_a_secured_kafka_needs_its_own_bootstrap_servers(tmp_path, monkeypatch):
    record(tmp_path)
    monkeypatch.setenv("OUTBOXKIT_KAFKA_SECURITY_PROTOCOL", "SSL")
    settings = Settings(_env_file=None, stack_dir=tmp_path)
    assert settings.kafka_security.security_protocol == "SSL"
    with pytest.raises(EndpointError, match="local stack's \\(PLAINTEXT\\)"):
        resolve(settings)


def test_the_local_stack_is_found_from_any_folder(tmp_path, monkeypatch) -> None:
    # A relative stack_dir (the default) names the repository's stack when the current folder
    # has none: an operator command run from elsewhere finds the same stack.
    from outboxkit_workshop import endpoints as workshop

    monkeypatch.chdir(tmp_path)
    relative = Path(".outboxkit/stack")
    assert workshop.state_file_of(relative) == workshop.REPOSITORY / relative / "state.json"
    (tmp_path / relative).mkdir(parents=True)
    record(tmp_path / relative)
    assert workshop.state_file_of(relative) == (tmp_path / relative / "state.json").resolve()
    assert workshop.state_file_of(tmp_path / "x") == tmp_path / "x" / "state.json"
