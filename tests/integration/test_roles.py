"""Least privilege on the real cluster: a service's role reaches only its own database, the CDC
role reads only the outbox, and both log in with passwords (SCRAM), not as the superuser."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from sqlalchemy import create_engine, pool, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, OperationalError

from outboxkit_workshop.devstack.stack import Stack


def _engine(url: str, **changes: str):  # type: ignore[no-untyped-def]
    return create_engine(make_url(url).set(**changes), poolclass=pool.NullPool)


@pytest.fixture(scope="module")
def two_services(stack: Stack) -> tuple[str, str]:
    tag = uuid.uuid4().hex[:6]
    return stack.add_service(f"roles_a_{tag}"), stack.add_service(f"roles_b_{tag}")


def test_a_service_role_owns_its_database_and_is_no_superuser(two_services):
    url_a, _ = two_services
    engine = _engine(url_a)
    with engine.begin() as conn:
        row = conn.execute(
            text(
                "SELECT current_user, r.rolsuper, r.rolreplication, r.rolcreaterole,"
                " r.rolcreatedb FROM pg_roles r WHERE r.rolname = current_user"
            )
        ).one()
        assert row[0] == make_url(url_a).username
        assert row[1:] == (False, False, False, False)
        # It owns its tables: it ran the migrations and can change its own schema.
        conn.execute(text("CREATE TABLE business_rows (n int)"))
        conn.execute(text("INSERT INTO business_rows VALUES (1)"))
        assert conn.execute(text("SELECT count(*) FROM outbox")).scalar() == 0
        owners = conn.execute(
            text("SELECT DISTINCT tableowner FROM pg_tables WHERE schemaname = 'public'")
        ).scalars()
        assert set(owners) == {row[0]}


def test_a_service_role_cannot_reach_another_services_tables(stack, two_services):
    url_a, url_b = two_services
    role_a, database_b = make_url(url_a).username, make_url(url_b).database
    with pytest.raises(OperationalError, match="permission denied for database"):
        _engine(url_a, database=database_b).connect()
    # Even let into the database, it can neither read nor write the other service's tables.
    admin = _engine(stack.database_url(), database=database_b)
    with admin.begin() as conn:
        conn.execute(text(f'GRANT CONNECT ON DATABASE "{database_b}" TO "{role_a}"'))
    try:
        with _engine(url_a, database=database_b).connect() as conn:
            for statement in (
                "SELECT * FROM outbox",
                "SELECT * FROM inbox_watermark",
                "INSERT INTO outbox_heartbeat (id) VALUES (2)",
                "DROP TABLE outbox",
            ):
                with pytest.raises(DBAPIError, match=r"permission denied|must be owner"):
                    conn.execute(text(statement))
                conn.rollback()
    finally:
        with admin.begin() as conn:
            conn.execute(text(f'REVOKE CONNECT ON DATABASE "{database_b}" FROM "{role_a}"'))


def test_the_cdc_role_reads_the_outbox_and_nothing_else(stack, two_services):
    url_a, _ = two_services
    cdc = stack.settings.cdc_role
    with _engine(url_a).begin() as conn:
        conn.execute(text("CREATE TABLE IF NOT EXISTS business_rows (n int)"))
    with _engine(url_a, username=cdc).connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM outbox")).scalar() >= 0
        assert conn.execute(
            text("SELECT rolreplication, rolsuper FROM pg_roles WHERE rolname = current_user")
        ).one() == (True, False)
        for statement in (
            "SELECT * FROM business_rows",
            "SELECT * FROM inbox_watermark",
            "INSERT INTO outbox (id) VALUES (gen_random_uuid())",
            "DELETE FROM outbox",
        ):
            with pytest.raises(DBAPIError, match="permission denied"):
                conn.execute(text(statement))
            conn.rollback()


def test_roles_log_in_with_their_password_only(stack, two_services):
    url_a, _ = two_services
    parsed = make_url(url_a)
    assert parsed.password is None and "passfile" in parsed.query  # no password in any URL
    wrong = dict(host=parsed.host, port=parsed.port, dbname=parsed.database, connect_timeout=5)
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(user=parsed.username, password="not-the-password", **wrong).close()
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(user="postgres", password="not-the-password", **wrong).close()
    url, password_file = stack.service_connection(parsed.database)
    assert "passfile" not in url and password_file.stat().st_mode & 0o077 == 0
    with psycopg.connect(user=parsed.username, password=password_file.read_text(), **wrong) as conn:
        assert conn.execute("SELECT current_user").fetchone() == (parsed.username,)


def test_only_the_owner_may_emit_the_messages_the_connector_captures(stack, two_services):
    """The connector routes logical decoding messages with the outbox prefix to Kafka; Postgres
    lets PUBLIC emit them, so without the revoke any role could forge an event."""
    url_a, _ = two_services
    # Another prefix than the connectors capture: '{}' as an outbox message would fail the task.
    emit = text("SELECT pg_logical_emit_message(true, 'outboxkit-test', '{}')")
    with _engine(url_a).begin() as conn:  # the service itself, in message mode
        conn.execute(emit)
    cdc = _engine(url_a, username=stack.settings.cdc_role)
    with cdc.connect() as conn, pytest.raises(DBAPIError, match="permission denied for function"):
        conn.execute(emit)


def test_a_cluster_an_earlier_version_created_with_trust_is_moved_to_passwords(tmp_path):
    """initdb -A trust, as before: the next start gives the superuser its password and replaces
    the access rules, so a wrong password, or none, is refused from then on."""
    import os
    import shutil
    import signal
    import subprocess
    import tempfile
    from pathlib import Path

    from outboxkit_workshop.devstack import artifacts, postgres
    from outboxkit_workshop.devstack.processes import free_port, stop
    from outboxkit_workshop.devstack.secrets import write_pgpass
    from outboxkit_workshop.devstack.settings import StackSettings

    found = artifacts.locate(StackSettings(_env_file=None).cache_dir)
    base = Path(tempfile.mkdtemp(prefix="outboxkit-trust-"))
    base.chmod(0o755)
    data, log = base / "pgdata", base / "postgres.log"
    data.mkdir(mode=0o700)
    user = postgres._run_as()
    postgres._hand_over(data, user)
    subprocess.run(
        [str(found.postgres_bin / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"],
        user=user,
        check=True,
        capture_output=True,
    )
    passfile = write_pgpass(base / "pgpass", [("postgres", "the-new-password")])
    port, pid = free_port(), None
    try:
        pid = postgres.start_server(
            found.postgres_bin, data, port, log, passfile, "the-new-password"
        )
        assert (data / "pg_hba.conf").read_text() == postgres.HBA
        with psycopg.connect(postgres.dsn(port, passfile)) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        for password in ("", "wrong"):
            with pytest.raises(psycopg.OperationalError, match="password"):
                psycopg.connect(
                    host="127.0.0.1",
                    port=port,
                    user="postgres",
                    dbname="postgres",
                    password=password,
                    passfile=os.devnull,
                    connect_timeout=5,
                ).close()
    finally:
        stop(pid, sig=signal.SIGINT)
        shutil.rmtree(base, ignore_errors=True)


def test_cdc_prepare_as_a_service_role_says_to_run_it_as_an_administrator(
    stack, two_services, tmp_path, monkeypatch, capsys
):
    """A service's role may not create the CDC role: one line naming the role that tried and
    the way (an administrator's --url), exit 1, no traceback, nothing changed."""
    from outboxkit import cli

    url_a, _ = two_services
    secret = tmp_path / "cdc-password"
    secret.write_text(uuid.uuid4().hex)
    secret.chmod(0o600)
    role = f"cdc_try_{uuid.uuid4().hex[:6]}"
    monkeypatch.setenv("OUTBOXKIT_CDC_PASSWORD_FILE", str(secret))
    monkeypatch.setenv("OUTBOXKIT_CDC_ROLE", role)
    assert cli.main(["cdc", "prepare", "--url", url_a]) == 1
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert f"role {make_url(url_a).username} cannot create or alter role {role!r}" in err
    assert "outboxkit cdc prepare` as an administrator (--url" in err
    assert "Traceback" not in err
    with _engine(stack.database_url()).connect() as conn:
        found = conn.execute(text("SELECT count(*) FROM pg_roles WHERE rolname = :r"), {"r": role})
        assert found.scalar_one() == 0
