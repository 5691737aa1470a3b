"""`outboxkit doctor` on the session stack given as a team's settings: all well, then each piece
broken for real (a database that is not there, one not migrated, a CDC role that does not exist,
an unreachable Kafka or Connect, a topic no job can read, a connector that differs or is gone,
a worker without the transform, no JDK, no Spark jars, a job outside the connector's prefix);
`cdc apply`'s refusals on the live Connect, by the database's identity where configs write it."""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine, make_url

from cdc.config import SOURCE_POSITION_HEADERS, source_identity_of
from outboxkit import cli
from outboxkit.doctor import Examination, Finding, examine
from outboxkit.endpoints import resolve
from outboxkit.settings import Settings
from outboxkit_workshop.devstack import artifacts, connectors
from outboxkit_workshop.devstack.processes import free_port, stop
from outboxkit_workshop.devstack.stack import Stack
from spark_consumers.job import Job
from tests.integration import foreign_connect

pytestmark = pytest.mark.integration
DEAD = "127.0.0.1:9"  # discard: nothing listens there


def team_settings(stack: Stack, **changes: Any) -> Settings:
    """The stack's own connector as a team's OUTBOXKIT_* settings would describe it."""
    known = {k: v for k, v in stack.settings.model_dump().items() if k in Settings.model_fields}
    known |= {
        "database_url": stack.database_url(),
        "kafka_bootstrap_servers": stack.bootstrap_servers(),
        "connect_url": stack.connect_url(),
        "cdc_password_reference": connectors.connector_settings(
            stack, stack.database_url()
        ).database_password,
        "stack_dir": Path("/nonexistent"),  # nothing from a state file
    }
    return Settings(_env_file=None, **(known | changes))  # type: ignore[call-arg]


def job(topics: tuple[str, ...], bootstrap: str) -> Job:
    return Job(
        name="doctor",
        consumer="doctor",
        topics=topics,
        handlers={},
        database_url="postgresql+psycopg://nobody@127.0.0.1/none",
        bootstrap_servers=bootstrap,
    )


def findings(settings: Settings, jobs: tuple[Job, ...] = ()) -> dict[str, list[Finding]]:
    by_check: dict[str, list[Finding]] = {}
    exam = Examination(settings, lambda: resolve(settings, fallback=False), jobs)
    for finding in examine(exam):
        by_check.setdefault(finding.check, []).append(finding)
    return by_check


def failed(found: dict[str, list[Finding]]) -> set[str]:
    return {name for name, items in found.items() if any(f.ok is False for f in items)}


def test_the_stack_as_a_team_would_set_it_up_is_well(stack: Stack) -> None:
    found = findings(team_settings(stack))
    assert failed(found) == set(), found
    assert {"database", "migrations", "wal_level", "cdc role", "kafka", "connect"} <= set(found)
    assert [f.ok for f in found["connector"]] == [True], found["connector"]  # as applied, RUNNING


def test_each_broken_piece_is_one_failing_line_with_its_fix(
    stack: Stack, empty_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cases: list[tuple[dict[str, Any], str, str]] = [
        ({"database_url": f"postgresql+psycopg://x@{DEAD}/x"}, "database", "OUTBOXKIT_DATABASE"),
        ({"database_url": empty_database}, "migrations", "outboxkit db upgrade"),
        ({"cdc_role": f"nobody_{uuid.uuid4().hex[:6]}"}, "cdc role", "outboxkit cdc prepare"),
        ({"kafka_bootstrap_servers": DEAD}, "kafka", "OUTBOXKIT_KAFKA_BOOTSTRAP_SERVERS"),
        ({"connect_url": f"http://{DEAD}"}, "connect", "OUTBOXKIT_CONNECT_URL"),
        ({"topic_prefix": "elsewhere.event."}, "connector", "outboxkit cdc apply"),
        ({"connector_name": "not-registered"}, "connector", "outboxkit cdc apply"),
    ]
    for changes, check, fix in cases:
        found = findings(team_settings(stack, **changes))
        assert check in failed(found), (changes, found)
        (bad,) = [f for f in found[check] if f.ok is False]
        assert fix in bad.line(), (changes, bad)
        # every line is true to its mark, and no error's class name stands for its message
        for line in (f.line() for fs in found.values() for f in fs):
            assert not (line.startswith("[ok]") and "missing" in line), line
            assert "None" not in line and "EndpointError" not in line, line
    # a secret file that cannot be read is a finding of the checks that need it
    found = findings(team_settings(stack, database_password_file=Path("/nonexistent/pw")))
    assert "database" in failed(found) and "OUTBOXKIT_DATABASE_PASSWORD_FILE" in str(found)
    # a dead Connect or database skips what needs it, and says so
    found = findings(team_settings(stack, connect_url=f"http://{DEAD}"))
    assert found["connector"][0].ok is None and "connect failed" in found["connector"][0].detail
    # what only `outboxkit consume` needs here is a warning, not a failure
    monkeypatch.setenv("PATH", "/nonexistent")
    found = findings(team_settings(stack, spark_jars=[Path("/nonexistent/x.jar")]))
    assert not {"java", "spark jars"} & failed(found)
    assert found["java"][0].warning and "install Java 17" in found["java"][0].line()
    (jars,) = found["spark jars"]
    assert jars.warning and "OUTBOXKIT_SPARK_JARS" in jars.line()


def test_jobs_topics_are_checked_against_kafka_and_the_connector_prefix(stack: Stack) -> None:
    prefix = stack.settings.topic_prefix
    stray = f"other{uuid.uuid4().hex[:6]}.event.order"
    found = findings(team_settings(stack), (job((stray,), stack.bootstrap_servers()),))
    assert {"kafka topics", "topic prefix"} <= failed(found)
    assert "outside the connector's prefix" in found["topic prefix"][0].detail
    assert (
        f"topic {stray} on {stack.bootstrap_servers()} missing" in found["kafka topics"][0].detail
    )
    # the job's own cluster is asked, not the operator's
    found = findings(team_settings(stack), (job((f"{prefix}order",), DEAD),))
    assert "kafka topics" in failed(found) and "kafka" not in failed(found)
    found = findings(team_settings(stack), (job((f"{prefix}order",), stack.bootstrap_servers()),))
    assert "topic prefix" not in failed(found)
    # with the job's own client options, as its clients reach the cluster (they win)
    reached = {"bootstrap.servers": stack.bootstrap_servers()}
    through_options = replace(job((stray,), DEAD), kafka_options=reached)
    found = findings(team_settings(stack), (through_options,))
    assert found["kafka topics"][0].detail == f"job doctor: topic {stray} on {DEAD} missing"


@pytest.fixture
def worker_without_transform(stack: Stack, tmp_path: Path) -> Iterator[str]:
    """A Connect worker with Debezium and nothing of outboxkit (`foreign_connect`)."""
    spec = {
        "stack_libs": str(artifacts.locate(stack.settings.cache_dir).connect_libs),
        "plugin_path": str(tmp_path / "plugins"),
        "bootstrap": stack.bootstrap_servers(),
        "port": free_port(),
        "group": f"doctor-{uuid.uuid4().hex[:6]}",
        "secrets_dir": stack.settings.connect_secrets_dir or str(stack.secrets.dir),
        "workdir": str(tmp_path / "worker"),
    }
    (tmp_path / "plugins").mkdir()
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    foreign_connect.main(str(tmp_path / "spec.json"))
    try:
        yield f"http://127.0.0.1:{spec['port']}"
    finally:
        stop(int((tmp_path / "worker" / "pid").read_text()))


def test_a_worker_without_the_transform_is_named_with_the_command_that_installs_it(
    stack: Stack, worker_without_transform: str, capsys: pytest.CaptureFixture[str]
) -> None:
    found = findings(team_settings(stack, connect_url=worker_without_transform))
    (plugins,) = found["connect plugins"]
    assert plugins.ok is False and SOURCE_POSITION_HEADERS in plugins.detail
    assert "outboxkit cdc plugin --into DIR" in plugins.fix


def test_the_command_prints_one_line_per_finding_and_exits_1_on_a_problem(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = team_settings(stack, kafka_bootstrap_servers=DEAD)
    for name in ("database_url", "kafka_bootstrap_servers", "connect_url", "connector_name"):
        monkeypatch.setenv(f"OUTBOXKIT_{name.upper()}", str(getattr(settings, name)))
    monkeypatch.setenv("OUTBOXKIT_STACK_DIR", "/nonexistent")
    assert cli.main(["doctor", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert {"check", "ok", "detail", "fix", "warning"} == set(report[0])
    (kafka,) = [r for r in report if r["check"] == "kafka"]
    assert kafka["ok"] is False and "OUTBOXKIT_KAFKA_BOOTSTRAP_SERVERS" in kafka["fix"]
    assert cli.main(["doctor"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("[FAIL] kafka: ") and " -- check " in line for line in lines)
    assert " problem(s), " in lines[-1] and lines[-1].endswith("warning(s)")


@pytest.fixture
def postgres_without_logical_decoding(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A Postgres cluster of its own with wal_level=replica (what a managed database has until
    its logical replication parameter is set): the URL of its superuser's postgres database."""
    from outboxkit_workshop.devstack import postgres
    from outboxkit_workshop.devstack.artifacts import POSTGRES_BIN
    from outboxkit_workshop.devstack.secrets import write_pgpass

    base = Path(tempfile.mkdtemp(prefix="outboxkit-doctor-"))
    base.chmod(0o755)  # the postgres user enters it
    password = uuid.uuid4().hex
    passfile = write_pgpass(base / "pgpass", [(postgres.SUPERUSER, password)])
    port = free_port()
    monkeypatch.setitem(postgres.SERVER_SETTINGS, "wal_level", "replica")
    postgres.initdb(POSTGRES_BIN, base / "data", base / "postgres.log", password)
    pid = postgres.start_server(
        POSTGRES_BIN, base / "data", port, base / "postgres.log", passfile, password
    )
    try:
        yield postgres.url(port, "postgres", passfile)
    finally:
        stop(pid)
        shutil.rmtree(base, ignore_errors=True)


def test_a_database_without_logical_decoding_is_named_with_its_setting(
    stack: Stack, postgres_without_logical_decoding: str
) -> None:
    found = findings(team_settings(stack, database_url=postgres_without_logical_decoding))
    (wal,) = found["wal_level"]
    assert wal.ok is False and "'replica'" in wal.detail and "wal_level=logical" in wal.fix


def attempt(
    settings: Settings, *, rename: bool = False, changed: dict[str, str] | None = None
) -> None:
    """`cdc apply`'s collision checks of the config it would put for ``settings`` (its values
    ``changed``) against the live Connect's connectors."""
    from outboxkit.commands.cdc_setup import _check_collisions
    from outboxkit.doctor import desired_config

    exam = Examination(settings, lambda: resolve(settings, fallback=False))
    client = exam.client()
    try:
        name = settings.connector_name
        config = desired_config(exam) | (changed or {})
        _check_collisions(client, name, config, client.get_config(name), rename=rename)
    finally:
        client.close()


def test_cdc_apply_refuses_a_second_connector_on_the_outbox_and_a_renamed_source(
    stack: Stack,
) -> None:
    # On the live Connect: the stack's own connector runs; a config for another connector on
    # its outbox, or its own under another source name, is refused before it is put.
    from outboxkit.commands.errors import CommandError

    attempt(team_settings(stack))  # the running connector as it is: nothing refused
    with pytest.raises(CommandError, match="already captures"):
        attempt(team_settings(stack, connector_name="second", server_name="second"))
    renamed = team_settings(stack, server_name="renamed")
    with pytest.raises(CommandError, match="--rename-source"):
        attempt(renamed)
    attempt(renamed, rename=True)  # allowed when asked for


def test_connectors_are_compared_by_the_identity_of_their_database(
    stack: Stack, engine: Engine
) -> None:
    """The running connector writes its database's identity; `cdc apply` and `doctor` read the
    database's and compare by it, whatever host name a config uses."""
    from outboxkit.commands.errors import CommandError
    from outboxkit.doctor import _connector, desired_config

    settings = team_settings(stack)
    name = stack.settings.connector_name
    client = stack.connect_client()
    try:
        running = client.get_config(name) or {}
        with engine.connect() as conn:
            system_identifier, database = conn.execute(
                text("SELECT system_identifier, current_database() FROM pg_control_system()")
            ).one()
        assert source_identity_of(running) == f"{system_identifier}/{database}"
        exam = Examination(settings, lambda: resolve(settings, fallback=False))
        desired = desired_config(exam)
        assert source_identity_of(desired) == source_identity_of(running)
        # the same outbox through another host name is the same database
        alias = "127.0.0.1" if running["database.hostname"] == "localhost" else "localhost"
        with pytest.raises(
            CommandError, match=rf"already captures public\.outbox.*through {alias}"
        ):
            attempt(
                team_settings(
                    stack, connect_database_host=alias, connector_name="second", server_name="b"
                )
            )
        # the database replaced under the running connector (another cluster, the same name)
        other = {"transforms.identity.value.literal": f"1/{database}"}
        with pytest.raises(CommandError, match="restored, re-created or replaced"):
            attempt(settings, changed=other)
        with pytest.raises(CommandError, match="already uses the source name"):  # another one
            attempt(team_settings(stack, connector_name="second"), changed=other)
        renamed = team_settings(stack, server_name=f"restored_{uuid.uuid4().hex[:6]}")
        attempt(renamed, rename=True, changed=other)  # a new source, as the refusal says
        found = _connector(client, name, desired | other)  # what the doctor reports
        assert found.ok is False and "is another one" in found.detail, found
        assert "--rename-source" in found.fix and "OUTBOXKIT_SERVER_NAME" in found.fix, found
    finally:
        client.close()


@pytest.fixture
def hidden_identity(empty_database: str) -> Iterator[tuple[str, str]]:
    """A role that may not run pg_control_system() in a database of its own (the function's
    EXECUTE revoked from PUBLIC there), and that database's URL used as that role."""
    role = f"no_identity_{uuid.uuid4().hex[:6]}"
    url = make_url(empty_database)
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE ROLE {role} NOLOGIN"))
        conn.execute(text("REVOKE EXECUTE ON FUNCTION pg_control_system() FROM PUBLIC"))
    as_role = url.update_query_dict({"options": f"-c role={role}"})  # the superuser acts as it
    try:
        yield as_role.render_as_string(hide_password=False), role
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP ROLE {role}"))
        admin.dispose()


def test_an_identity_the_role_may_not_read_names_the_grant(
    stack: Stack, hidden_identity: tuple[str, str]
) -> None:
    from outboxkit.commands.cdc_setup import _identity
    from outboxkit.commands.errors import CommandError

    url, role = hidden_identity
    grant = f"GRANT EXECUTE ON FUNCTION pg_control_system() TO {role}"
    with pytest.raises(CommandError, match=re.escape(grant)):
        _identity(url)
    found = findings(team_settings(stack, database_url=url))
    (identity,) = found["source identity"]
    assert identity.ok is False and grant in identity.fix, identity
