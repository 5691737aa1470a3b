"""No command destroys or rewinds state by default: `db downgrade` needs its revision and its
database named, prints its plan, asks (or refuses without a terminal unless --yes) and records
what it did; `inbox rewind` and `inbox redrive` need their partition; `dev saga kill` needs its
processes or --all. The database is never reached: the runner and the inbox operations are
replaced by fakes that fail the test when something would change."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any, NoReturn

import pytest
from sqlalchemy.engine import make_url

from inbox import operations
from inbox.operations import RewindPlan
from migrations import runner
from outboxkit import cli
from outboxkit.commands import confirm, inbox_changes
from outboxkit.commands.errors import PROBLEM, USAGE
from outboxkit_workshop.devstack import stack as devstack_stack

URL = "postgresql+psycopg://shop:s3cret@db.example:5432/shop"
HEAD = runner.ACTION_LOG_REVISION


def refuse(what: str) -> Any:
    def refused(*args: Any, **kwargs: Any) -> NoReturn:
        raise AssertionError(f"{what} was called")

    return refused


class Terminal(io.StringIO):
    """A stdin that is a terminal (the answer comes from the patched `input`)."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def database(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """The settings name URL, at HEAD; nothing connects: the runner's downgrade and the action
    log are recorded in the dict returned, every engine refused."""
    for name in ("OUTBOXKIT_DATABASE_URL", "OUTBOXKIT_OPERATOR", "OUTBOXKIT_STACK_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OUTBOXKIT_DATABASE_URL", URL)
    monkeypatch.setattr("outboxkit.endpoints.recorded_by_stack", refuse("the local stack"))
    monkeypatch.setattr(runner, "engine_for", refuse("an engine"))
    monkeypatch.setattr("outboxkit.kernel.engines.engine_for", refuse("an engine"))
    monkeypatch.setattr("alembic.command.downgrade", refuse("alembic's downgrade"))
    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # not a terminal
    done: dict[str, Any] = {"revision": HEAD, "downgrades": [], "actions": []}

    def downgrade(url: Any, revision: str) -> None:
        done["downgrades"].append(revision)
        done["revision"] = None if revision == "base" else revision

    monkeypatch.setattr(runner, "current", lambda url: done["revision"])
    monkeypatch.setattr(runner, "downgrade", downgrade)
    monkeypatch.setattr(operations, "record_action", lambda e, **kw: done["actions"].append(kw))
    yield done


class FakeEngine:
    url = make_url(URL)

    def dispose(self) -> None:
        pass


def test_downgrade_without_a_revision_is_a_usage_error_that_touches_nothing(
    database: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as refused:
        cli.main(["db", "downgrade"])
    assert refused.value.code == 2
    assert "the following arguments are required: REVISION" in capsys.readouterr().err
    assert database["downgrades"] == [] and database["actions"] == []


def test_without_a_terminal_or_yes_downgrade_prints_its_plan_and_refuses(
    database: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["db", "downgrade", "0012_inbox_identity"]) == USAGE
    out, err = capsys.readouterr()
    assert "add --yes" in err and "nothing changed" in err
    assert "postgresql+psycopg://shop:***@db.example:5432/shop" in out and "s3cret" not in out
    assert f"from revision {HEAD} to 0012_inbox_identity" in out
    undone = ("0015_inbox_operator_actions", "0014_inbox_retries", "0013_outbox_scheduled")
    assert all(f"    {revision}: " in out for revision in undone)
    assert "    0012_inbox_identity: " not in out  # the target stays
    assert database["downgrades"] == [] and database["actions"] == []


def test_downgrade_dry_run_changes_nothing(
    database: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["db", "downgrade", "base", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "to base: 14 revision(s) undone" in out and "every event would be applied" in out
    assert "dry run: nothing changed" in out
    assert database["downgrades"] == [] and database["actions"] == []


def test_downgrade_with_yes_runs_the_plan_and_records_it(
    database: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("outboxkit.kernel.engines.engine_for", lambda url, _: FakeEngine())
    monkeypatch.setenv("OUTBOXKIT_OPERATOR", "ada")
    assert cli.main(["db", "downgrade", "-1", "--yes", "--url", URL]) == 0
    assert database["downgrades"] == ["0014_inbox_retries"]  # -1 resolved as planned
    assert database["actions"] == []
    assert "not in the operator action log" in capsys.readouterr().out  # -1 from 0015 drops it
    # The log is the newest revision today: every downgrade drops it. Once revisions come
    # after it, a downgrade that keeps it is recorded there.
    monkeypatch.setattr(runner, "ACTION_LOG_REVISION", "0013_outbox_scheduled")
    database.update(revision=HEAD, downgrades=[], actions=[])
    assert cli.main(["db", "downgrade", "0014_inbox_retries", "--yes"]) == 0
    (action,) = database["actions"]
    assert action["who"] == "ada" and action["command"] == "db downgrade"
    assert action["count"] == 1 and "s3cret" not in action["target"]
    assert action["detail"]["revisions"] == ["0015_inbox_operator_actions"]


def test_downgrade_never_falls_back_to_the_local_stack(
    database: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("OUTBOXKIT_DATABASE_URL")
    assert cli.main(["db", "downgrade", "base", "--yes"]) == USAGE
    assert "pass --url or set OUTBOXKIT_DATABASE_URL" in capsys.readouterr().err
    assert database["downgrades"] == []


def test_downgrade_asks_on_a_terminal(
    database: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", Terminal())
    monkeypatch.setattr("builtins.input", lambda prompt: "n")
    assert cli.main(["db", "downgrade", "base"]) == PROBLEM
    assert "not confirmed: nothing changed" in capsys.readouterr().err
    assert database["downgrades"] == []
    monkeypatch.setattr("builtins.input", lambda prompt: "y")
    assert cli.main(["db", "downgrade", "base"]) == 0
    assert database["downgrades"] == ["base"]
    assert database["actions"] == []  # base drops the log itself


@pytest.mark.parametrize("revision", ["nope", "0016_future"])
def test_an_unknown_revision_is_a_usage_error(
    database: dict[str, Any], revision: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["db", "downgrade", revision, "--yes"]) == USAGE
    assert "outboxkit db current" in capsys.readouterr().err
    assert database["downgrades"] == []


def test_a_database_at_the_target_has_nothing_to_undo(
    database: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["db", "downgrade", HEAD]) == 0  # no terminal, no --yes: nothing to ask
    assert "nothing to undo" in capsys.readouterr().out


@pytest.fixture
def inbox_db(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A partition at watermark 20 with 3 ids of its window above 5; rewinds and actions
    recorded in the dict returned."""
    done: dict[str, Any] = {"rewinds": [], "actions": []}
    monkeypatch.setattr(inbox_changes, "engine_of", lambda args, settings: FakeEngine())
    monkeypatch.setattr("sys.stdin", io.StringIO(""))

    def plan(engine: Any, consumer: str, topic: str, partition: int, offset: int) -> RewindPlan:
        operations.refuse_rewind(f"{consumer} {topic}", partition, 20, offset)  # the one rule
        return RewindPlan(20, offset, 3)

    monkeypatch.setattr(operations, "rewind_plan", plan)

    def rewind(engine: Any, *where: Any) -> int:
        done["rewinds"].append(where)
        return 20

    monkeypatch.setattr(operations, "rewind", rewind)
    monkeypatch.setattr(operations, "record_action", lambda e, **kw: done["actions"].append(kw))
    return done


REWIND = ["inbox", "rewind", "--consumer", "payments", "--topic", "orders", "--partition", "2"]


def test_rewind_without_a_partition_is_a_usage_error(
    inbox_db: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["inbox", "rewind", "--consumer", "payments", "--topic", "orders", "--offset", "5"]
    with pytest.raises(SystemExit) as refused:
        cli.main(argv)
    assert refused.value.code == 2
    assert "the following arguments are required: --partition" in capsys.readouterr().err
    assert inbox_db["rewinds"] == []


def test_rewind_prints_its_plan_and_needs_yes_without_a_terminal(
    inbox_db: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main([*REWIND, "--offset", "5", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "watermark 20 -> 5: 15 offset(s), 6 to 20, read and applied again" in out
    assert "the 3 event(s) the window holds above 5" in out and "dry run: nothing changed" in out
    assert cli.main([*REWIND, "--offset", "5"]) == USAGE
    assert "add --yes" in capsys.readouterr().err
    assert inbox_db["rewinds"] == [] and inbox_db["actions"] == []


def test_rewind_with_yes_rewinds_and_records(
    inbox_db: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OUTBOXKIT_OPERATOR", "grace")
    assert cli.main([*REWIND, "--offset", "5", "--yes"]) == 0
    assert inbox_db["rewinds"] == [("payments", "orders", 2, 5)]
    (action,) = inbox_db["actions"]
    assert (action["who"], action["command"], action["target"], action["count"]) == (
        "grace",
        "inbox rewind",
        "payments orders[2]",
        15,
    )


@pytest.mark.parametrize("offset", ["21", "-2", "20"])
def test_rewind_refuses_to_move_a_watermark_forward_or_nowhere(
    inbox_db: dict[str, Any], offset: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main([*REWIND, "--offset", offset, "--yes"]) == USAGE
    err = capsys.readouterr().err
    assert "is not a rewind of payments orders[2]" in err or "nothing to rewind" in err
    assert inbox_db["rewinds"] == []


@pytest.mark.parametrize(
    "target",
    [
        ["--topic", "orders"],  # the partition was 0 by default
        ["--partition", "1"],
        ["--id", "7", "--partition", "1"],
        ["--id", "7", "--key", "k"],
    ],
)
def test_redrive_needs_one_explicit_target(
    target: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(inbox_changes, "job_inbox", refuse("the job"))
    assert cli.main(["inbox", "redrive", "--job", "mod:job", *target]) == USAGE
    assert "--" in capsys.readouterr().err


def test_skip_dry_run_shows_the_record_and_skips_nothing(
    inbox_db: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    row = {"id": 7, "consumer": "payments", "topic": "orders", "partition": 2, "offset": 9}
    found = {**row, "key": "k1", "state": "parked", "error": "boom"}
    monkeypatch.setattr(operations, "show", lambda engine, parked_id: found)
    monkeypatch.setattr(operations, "skip", refuse("skip"))
    argv = ["inbox", "skip", "--id", "7", "--reason", "bad data", "--dry-run"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "would skip parked record 7: payments orders[2] offset 9 (key 'k1'): boom" in out
    assert inbox_db["actions"] == []


def test_saga_kill_needs_names_or_all(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(devstack_stack.Stack, "__init__", refuse("the dev stack"))
    for argv in (["dev", "saga", "kill"], ["dev", "saga", "kill", "orders", "--all"]):
        assert cli.main(argv) == USAGE
        assert "saga kill needs its target" in capsys.readouterr().err
    with pytest.raises(AssertionError, match="the dev stack was called"):
        cli.main(["dev", "saga", "kill", "--all"])  # accepted: it goes on to the stack


def test_the_operator_is_the_setting_else_the_os_user(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OUTBOXKIT_OPERATOR", " ada ")
    assert confirm.operator() == "ada"
    monkeypatch.setenv("OUTBOXKIT_OPERATOR", "")
    monkeypatch.setattr("getpass.getuser", lambda: "svc")
    assert confirm.operator() == "svc"


def test_minus_n_counts_down_from_the_database_s_revision_not_from_head() -> None:
    # Alembic reads -1 as "head minus one": from a database below head it would undo nothing,
    # or refuse; `db downgrade -N` means N revisions down from where the database is.
    chain = [s.revision for s in runner.steps_down(runner.head() or "", "base")]
    below_head = chain[1]
    assert [s.revision for s in runner.steps_down(below_head, "-1")] == [below_head]
    assert [s.revision for s in runner.steps_down(below_head, "-2")] == chain[1:3]
    with pytest.raises(runner.MigrationError, match="revision\\(s\\) down"):
        runner.steps_down(below_head, f"-{len(chain)}")
