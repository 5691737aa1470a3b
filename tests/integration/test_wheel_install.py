"""The wheel, built and installed in a fresh venv outside the repository, runs the page
"Install on your own infrastructure" (docs/how-to/install.md) end to end: its blocks in order,
from that venv, with the session stack's Postgres, Kafka and Connect as external services."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from cdc.preflight import drop_slot
from outboxkit.devstack.artifacts import cached_spark_jars
from outboxkit.devstack.connect import SECRETS_PROVIDER
from outboxkit.devstack.stack import Stack
from tests.doc_snippets import ROOT, wheel_script

pytestmark = [pytest.mark.integration, pytest.mark.spark]

PAGE = ROOT / "docs" / "how-to" / "install.md"
TOP_LEVEL = {"outbox", "inbox", "cdc", "service_template", "spark_consumers", "migrations"}
TOP_LEVEL |= {"outboxkit"}
SHIPPED = ("outboxkit/devstack/java/pom.xml", "spark_consumers/submit.py", "migrations/env.py")


def top_level(record_paths: list[str]) -> set[str]:
    """The top-level names of a wheel's files (its .dist-info left out)."""
    return {p.split("/")[0] for p in record_paths if not p.split("/")[0].endswith(".dist-info")}


def build_wheel(dist: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = dist.glob("outboxkit-*.whl")
    return wheel


def clean_environment(passfile: str) -> dict[str, str]:
    """This process's environment without the repository (not its venv, not on PYTHONPATH),
    with the administrator's libpq password file (the page's ~/.pgpass)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OUTBOXKIT_", "VIRTUAL_ENV"))}
    env.pop("PYTHONPATH", None)
    env.pop("PYSPARK_PYTHON", None)
    env.pop("PYSPARK_DRIVER_PYTHON", None)
    path = [p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(str(ROOT))]
    env["PATH"] = os.pathsep.join(path)
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env["PGPASSFILE"] = passfile
    return env


@pytest.fixture
def own_infrastructure(stack: Stack, tmp_path: Path) -> Iterator[dict[str, str]]:
    """The page's settings, naming the session stack as a team's own services; what the page
    creates (database, roles, connector, slot) is removed afterwards."""
    tag = uuid.uuid4().hex[:6]
    admin = make_url(stack.database_url())
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "shop.password").write_text(uuid.uuid4().hex + "\n")
    cdc_role = f"shop_cdc_{tag}"
    stack.secrets.password(cdc_role)  # where the Connect worker's config provider reads it
    provider_dir = stack.settings.connect_secrets_dir or str(stack.secrets.dir)
    database = f"postgresql+psycopg://shop@127.0.0.1:{admin.port}/shop"
    bootstrap = stack.bootstrap_servers()
    settings = {
        "PGADMIN": f"postgresql://{admin.username}@127.0.0.1:{admin.port}",
        "OUTBOXKIT_DATABASE_URL": database,
        "OUTBOXKIT_DATABASE_PASSWORD_FILE": str(secrets / "shop.password"),
        "OUTBOXKIT_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "OUTBOXKIT_CONNECT_URL": stack.connect_url(),
        "OUTBOXKIT_CONNECT_DATABASE_HOST": "127.0.0.1",
        "OUTBOXKIT_CDC_ROLE": cdc_role,
        "OUTBOXKIT_CDC_PASSWORD_FILE": str(stack.secrets.file(cdc_role)),
        "OUTBOXKIT_CDC_PASSWORD_REFERENCE": (
            f"${{{SECRETS_PROVIDER}:{provider_dir}:{cdc_role}.password}}"
        ),
        "OUTBOXKIT_SERVER_NAME": f"shop_{tag}",
        "OUTBOXKIT_CONNECTOR_NAME": f"shop-outbox-{tag}",
        "OUTBOXKIT_SLOT_NAME": f"shop_outbox_{tag}",
        "OUTBOXKIT_PUBLICATION_NAME": f"shop_outbox_{tag}",
        "OUTBOXKIT_TOPIC_PREFIX": f"shop{tag}.event.",
        "SHOP_DATABASE_URL": database,
        "SHOP_DATABASE_PASSWORD_FILE": str(secrets / "shop.password"),
        "SHOP_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "SHOP_TOPIC_PREFIX": f"shop{tag}.event.",
        "SPARK_MASTER": "local[1]",
    }
    try:
        yield settings
    finally:
        stack.connect_client().delete(settings["OUTBOXKIT_CONNECTOR_NAME"])
        server = create_engine(admin.set(database="postgres"), isolation_level="AUTOCOMMIT")
        deadline = time.monotonic() + 20
        with server.connect() as conn:
            while True:  # the walsender may take a moment to let the slot go
                try:
                    exists = "SELECT 1 FROM pg_replication_slots WHERE slot_name = :s"
                    if conn.execute(text(exists), {"s": settings["OUTBOXKIT_SLOT_NAME"]}).first():
                        drop_slot(conn, settings["OUTBOXKIT_SLOT_NAME"])
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
            conn.execute(text("DROP DATABASE IF EXISTS shop WITH (FORCE)"))
            conn.execute(text(f'DROP ROLE IF EXISTS shop, "{cdc_role}"'))
        server.dispose()
        stack.secrets.file(cdc_role).unlink(missing_ok=True)


def test_the_wheel_installs_and_runs_the_install_page(
    own_infrastructure: dict[str, str], stack: Stack, tmp_path: Path
) -> None:
    started = time.monotonic()
    wheel = build_wheel(tmp_path / "dist")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert top_level(names) == TOP_LEVEL
    for shipped in SHIPPED:
        assert shipped in names, f"{shipped} is not in the wheel"
    assert f"'{wheel.name}[service,spark]'" in PAGE.read_text(), "the page names another wheel"

    work = tmp_path / "work"
    work.mkdir()
    (work / wheel.name).write_bytes(wheel.read_bytes())
    jars = ",".join(str(j) for j in cached_spark_jars(stack.settings.cache_dir))
    script = work / "install.sh"
    script.write_text(wheel_script(PAGE, own_infrastructure, {r"--packages \S+": f"--jars {jars}"}))
    log = work / "install.log"
    with log.open("w") as out:
        shell = subprocess.Popen(
            ["bash", str(script)],
            cwd=work,
            env=clean_environment(str(make_url(stack.database_url()).query["passfile"])),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            code = shell.wait(timeout=600)
        finally:
            for sig in (signal.SIGTERM, signal.SIGKILL):  # uvicorn and spark-submit, backgrounded
                try:
                    os.killpg(shell.pid, sig)
                except ProcessLookupError:
                    break
                time.sleep(3)
    tails = "\n".join(
        f"--- {name}\n" + "\n".join(p.read_text().splitlines()[-40:])
        for name in ("install.log", "service.log", "consumer.log")
        if (p := work / name).exists()
    )
    assert code == 0, tails
    output = log.read_text()
    assert "order paid" in output, tails
    connector = own_infrastructure["OUTBOXKIT_CONNECTOR_NAME"]
    assert f"connector {connector}: unchanged" in output, tails  # the second apply
    assert own_infrastructure["OUTBOXKIT_CDC_PASSWORD_REFERENCE"] in output  # the dry-run's JSON
    cdc_password = stack.secrets.password(own_infrastructure["OUTBOXKIT_CDC_ROLE"])
    assert cdc_password not in output, "a password was printed"

    installed = next((work / ".venv" / "lib").glob("python3*/site-packages"))
    (record,) = installed.glob("outboxkit-*.dist-info/RECORD")
    paths = [line.split(",")[0] for line in record.read_text().splitlines()]
    assert top_level([p for p in paths if not p.startswith("../")]) - {"__pycache__"} == TOP_LEVEL
    assert (installed / "spark_consumers" / "submit.py").is_file()
    print(f"wheel built, installed and the page run in {time.monotonic() - started:.0f} s")
