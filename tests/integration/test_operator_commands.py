"""The operator commands run where there is no dev stack: every endpoint from the settings
(as a deployment gives them), no state file, and nothing constructs the dev stack."""

from __future__ import annotations

import io
import json
import uuid

import pytest
from sqlalchemy import create_engine, insert, select

from inbox.tables import watermarks
from migrations import runner
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
    assert cli.main(["outbox", "cleanup", "--older-than-hours", "10000", "--yes"]) == 0
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


def test_rewind_asks_first_then_replays_and_is_recorded(
    production_like, stack, monkeypatch, capsys
):
    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # not a terminal, even under -s
    consumer = f"rewind_{uuid.uuid4().hex[:8]}"
    where = ["--consumer", consumer, "--topic", "t", "--partition", "1", "--offset", "4"]
    engine = create_engine(stack.database_url())
    try:
        with engine.begin() as conn:
            conn.execute(
                insert(watermarks).values(consumer=consumer, topic="t", partition=1, offset=9)
            )

        def watermark() -> int:
            with engine.connect() as conn:
                query = select(watermarks.c.offset).where(watermarks.c.consumer == consumer)
                return int(conn.execute(query).scalar_one())

        assert cli.main(["inbox", "rewind", *where]) == 2  # pytest's stdin: not a terminal
        assert "add --yes" in capsys.readouterr().err and watermark() == 9
        assert cli.main(["inbox", "rewind", *where, "--dry-run"]) == 0
        assert "watermark 9 -> 4: 5 offset(s)" in capsys.readouterr().out and watermark() == 9
        monkeypatch.setenv("OUTBOXKIT_OPERATOR", "ci-operator")
        assert cli.main(["inbox", "rewind", *where, "--yes"]) == 0
        assert watermark() == 4
        capsys.readouterr()
        assert cli.main(["inbox", "actions", "--command", "inbox rewind", "--json"]) == 0
        rows = [r for r in json.loads(capsys.readouterr().out) if consumer in r["target"]]
        assert [(r["who"], r["target"], r["count"]) for r in rows] == [
            ("ci-operator", f"{consumer} t[1]", 5)
        ]
        assert rows[0]["detail"] == {"from": 9, "to": 4, "forgotten_ids": 0}
    finally:
        engine.dispose()


def test_downgrade_names_its_revision_and_database_and_asks(
    production_like, empty_database, monkeypatch, capsys
):
    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # not a terminal, even under -s
    monkeypatch.setenv("OUTBOXKIT_DATABASE_URL", empty_database)
    assert cli.main(["db", "upgrade"]) == 0
    head = runner.head()
    with pytest.raises(SystemExit) as refused:
        cli.main(["db", "downgrade"])
    assert refused.value.code == 2 and runner.current(empty_database) == head
    assert cli.main(["db", "downgrade", "0013_outbox_scheduled"]) == 2  # no terminal, no --yes
    assert runner.current(empty_database) == head
    capsys.readouterr()
    assert cli.main(["db", "downgrade", "0013_outbox_scheduled", "--dry-run"]) == 0
    plan = capsys.readouterr().out
    assert "    0015_inbox_operator_actions: " in plan and "    0014_inbox_retries: " in plan
    assert runner.current(empty_database) == head
    assert cli.main(["db", "downgrade", "0013_outbox_scheduled", "--yes"]) == 0
    assert runner.current(empty_database) == "0013_outbox_scheduled"
    assert "not in the operator action log" in capsys.readouterr().out  # it dropped the log
    monkeypatch.delenv("OUTBOXKIT_DATABASE_URL")  # no fallback to a local stack, ever
    assert cli.main(["db", "downgrade", "base", "--yes"]) == 2
    assert "pass --url or set OUTBOXKIT_DATABASE_URL" in capsys.readouterr().err
    assert runner.current(empty_database) == "0013_outbox_scheduled"


def test_outbox_cleanup_names_its_target_tells_the_truth_dry_and_is_recorded(
    empty_database, monkeypatch, capsys
):
    """Retained rows, two old and one new: the dry run counts the two and deletes nothing; the
    run deletes them, says from which database, and the action log records it; a negative age
    is refused naming the option."""
    from datetime import UTC, datetime, timedelta

    from inbox import operations
    from outbox.table import outbox_table

    runner.upgrade(empty_database)
    engine = create_engine(empty_database)
    now = datetime.now(UTC)
    with engine.begin() as conn:
        for hours in (48, 30, 1):
            conn.execute(
                insert(outbox_table).values(
                    id=uuid.uuid4(), aggregatetype="order", aggregateid=f"o-{hours}",
                    type="Placed", payload={}, created_at=now - timedelta(hours=hours),
                )
            )  # fmt: skip
    monkeypatch.setenv("OUTBOXKIT_OPERATOR", "olive")
    base = ["outbox", "cleanup", "--url", empty_database, "--older-than-hours", "24"]
    assert cli.main([*base, "--dry-run"]) == 0
    dry = capsys.readouterr().out
    database = empty_database.rpartition("/")[2]
    assert "2 of the outbox's 3 rows" in dry and database in dry and "nothing changed" in dry
    with engine.connect() as conn:
        assert len(conn.execute(select(outbox_table.c.id)).all()) == 3
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert cli.main(base) == 2  # not a terminal, no --yes: refused, nothing changed
    assert "add --yes" in capsys.readouterr().err
    assert cli.main([*base, "--yes"]) == 0
    assert "deleted 2 rows" in capsys.readouterr().out
    with engine.connect() as conn:
        left = conn.execute(select(outbox_table.c.aggregateid)).scalars().all()
    assert left == ["o-1"]
    logged = operations.list_actions(engine, command="outbox cleanup")
    assert [(a["who"], a["count"]) for a in logged] == [("olive", 2)]
    with pytest.raises(SystemExit) as refused:
        cli.main(["outbox", "cleanup", "--url", empty_database, "--older-than-hours", "-5"])
    assert refused.value.code == 2 and "--older-than-hours" in capsys.readouterr().err
    engine.dispose()
