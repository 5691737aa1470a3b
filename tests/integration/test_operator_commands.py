"""The operator commands run where there is no dev stack: every endpoint from the settings
(as a deployment gives them), no state file, and nothing constructs the dev stack."""

from __future__ import annotations

import pytest

from outboxkit import cli
from outboxkit_workshop.devstack import stack as devstack_stack

pytestmark = pytest.mark.integration


@pytest.fixture
def production_like(stack, tmp_path, monkeypatch):
    """The test stack's endpoints as settings alone, an empty stack directory, and a dev stack
    that refuses to be built."""
    nowhere = tmp_path / "no-stack"
    nowhere.mkdir()
    for name, value in {
        "STACK_DIR": str(nowhere),
        "DATABASE_URL": stack.database_url(),
        "KAFKA_BOOTSTRAP_SERVERS": stack.bootstrap_servers(),
        "CONNECT_URL": stack.connect_url(),
        "CONNECTOR_NAME": stack.settings.connector_name,
        "SLOT_NAME": stack.settings.slot_name,
        "PUBLICATION_NAME": stack.settings.publication_name,
    }.items():
        monkeypatch.setenv(f"OUTBOXKIT_{name}", value)

    def refuse(*args, **kwargs):
        raise AssertionError("an operator command built the dev stack")

    monkeypatch.setattr(devstack_stack.Stack, "__init__", refuse)
    return nowhere


def test_operator_commands_take_every_endpoint_from_the_settings(production_like, capsys):
    assert cli.main(["db", "current"]) == 0
    assert "database at revision" in capsys.readouterr().out
    assert cli.main(["outbox", "cleanup", "--older-than-hours", "10000"]) == 0
    assert "outbox cleanup: deleted 0 rows" in capsys.readouterr().out
    assert cli.main(["cdc", "preflight", "--expect-slot"]) == 0
    preflight = capsys.readouterr().out
    assert "[FAIL]" not in preflight and "RUNNING" in preflight, preflight
    assert cli.main(["cdc", "restart"]) == 0  # nothing failed: a no-op that reads the status
    assert "RUNNING" in capsys.readouterr().out
    assert cli.main(["inbox", "status", "--json"]) == 0
    capsys.readouterr()
    assert list(production_like.iterdir()) == []  # no state file, no pgpass, nothing written


def test_without_settings_or_a_state_file_a_command_says_what_to_set(
    production_like, monkeypatch, capsys
):
    monkeypatch.delenv("OUTBOXKIT_DATABASE_URL")
    assert cli.main(["inbox", "status"]) == 2  # a setting to add: a usage error
    assert "no database: set OUTBOXKIT_DATABASE_URL" in capsys.readouterr().err
    monkeypatch.delenv("OUTBOXKIT_CONNECT_URL")
    assert cli.main(["cdc", "restart"]) == 2
    assert "set OUTBOXKIT_CONNECT_URL" in capsys.readouterr().err


def test_a_database_without_the_framework_tables_says_to_upgrade(
    production_like, empty_database, monkeypatch, capsys
):
    from sqlalchemy import make_url

    monkeypatch.setenv("OUTBOXKIT_DATABASE_URL", empty_database)
    assert cli.main(["inbox", "status"]) == 3
    database = make_url(empty_database).database
    err = capsys.readouterr().err
    prefix = f"outboxkit: error: the framework's tables are missing in {database} (no inbox_"
    assert err.startswith(prefix) and err.endswith("): run `outboxkit db upgrade`\n"), err
    assert err.count("\n") == 1
    assert cli.main(["db", "upgrade"]) == 0
    assert cli.main(["inbox", "status", "--json"]) == 0
