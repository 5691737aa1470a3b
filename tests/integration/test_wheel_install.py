"""The wheel, built and installed in a fresh venv outside the repository, runs the page
"Install on your own infrastructure" (docs/how-to/install.md) end to end: its blocks in order,
from that venv, with the session stack's Postgres, Kafka and Connect as external services.

Besides what the page states it substitutes, the test builds the wheel with ``uv build`` and
creates the venv and installs the wheel with its dependencies with uv (``uv venv``, ``uv pip
install``; uv comes with the ``dev`` extra) where the page says ``python3 -m venv`` and
``pip install``: uv links the packages from its cache instead of unpacking and compiling them
(pyspark alone is hundreds of MB). It installs ``--offline`` from that cache when every
dependency is there, else from the index."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from uv import find_uv_bin

from cdc.config import SOURCE_POSITION_HEADERS
from cdc.connect import ConnectClient
from outboxkit.kernel.wire import SOURCE_IDENTITY
from outboxkit_workshop.devstack import artifacts
from outboxkit_workshop.devstack.artifacts import cached_spark_jars
from outboxkit_workshop.devstack.connect import SECRETS_PROVIDER
from outboxkit_workshop.devstack.processes import free_port, stop
from outboxkit_workshop.devstack.stack import Stack
from tests.doc_snippets import ROOT, shell_script
from tests.integration import foreign_connect
from tests.integration.shell_session import drop_service, run_session
from tests.kafka import read_records

pytestmark = [pytest.mark.integration, pytest.mark.spark]

PAGE = ROOT / "docs" / "how-to" / "install.md"
TOP_LEVEL = {"outbox", "inbox", "cdc", "service_template", "spark_consumers", "migrations"}
TOP_LEVEL |= {"outboxkit"}
SHIPPED = (
    "spark_consumers/submit.py",
    "migrations/env.py",
    "cdc/lib/outboxkit-smt-1.jar",
    "outboxkit/console/templates/overview.html",  # the console's pages and script
    "outboxkit/console/static/console.js",
)
# Where the page says to restart the Connect workers: the test starts its worker there.
RESTART = r"# restart the Connect workers here"


def top_level(record_paths: list[str]) -> set[str]:
    """The top-level names of a wheel's files (its .dist-info left out)."""
    return {p.split("/")[0] for p in record_paths if not p.split("/")[0].endswith(".dist-info")}


UV = find_uv_bin()


def build_wheel(dist: Path) -> Path:
    subprocess.run(
        [UV, "build", "--wheel", "-q", "--out-dir", str(dist), str(ROOT)],
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
    env["UV_PYTHON_DOWNLOADS"] = "never"  # the venv on the python3 the page names
    return env


def uv_install(wheel: str) -> dict[str, str]:
    """The page's venv and install lines, done by uv: from its cache when it has everything."""
    install = f"{UV} pip install --python .venv/bin/python '{wheel}[service,spark]'"
    return {
        r"python3 -m venv \.venv": f"{UV} venv --python python3 .venv",
        r"\.venv/bin/pip install \S+": f"{install} --offline || {install}",
    }


@pytest.fixture
def own_connect(stack: Stack, tmp_path: Path) -> Iterator[dict[str, str]]:
    """A Connect worker with nothing of outboxkit on it (`foreign_connect`), started by the
    page's session where the page restarts the workers: its URL, its plugin path (empty until
    the page's `outboxkit cdc plugin`) and the command that starts it."""
    work = tmp_path / "own-connect"
    plugins = work / "plugins"
    plugins.mkdir(parents=True)
    port = free_port()
    spec = {
        "stack_libs": str(artifacts.locate(stack.settings.cache_dir).connect_libs),
        "plugin_path": str(plugins),
        "bootstrap": stack.bootstrap_servers(),
        "port": port,
        "group": f"own-connect-{uuid.uuid4().hex[:6]}",
        "secrets_dir": stack.settings.connect_secrets_dir or str(stack.secrets.dir),
        "workdir": str(work),
    }
    (work / "spec.json").write_text(json.dumps(spec))
    python = ROOT / ".venv" / "bin" / "python"
    starter = f"{python} {foreign_connect.__file__} {work / 'spec.json'}"
    path = f"{ROOT}{os.pathsep}{ROOT / 'workshop'}"
    try:
        yield {
            "url": f"http://127.0.0.1:{port}",
            "plugins": str(plugins),
            "start": f"PYTHONPATH={path} {starter}",
            "pid_file": str(work / "pid"),
        }
    finally:
        stop_own_connect(work / "pid")


def stop_own_connect(pid_file: Path) -> None:
    """Stop the worker the page started (before its slot is dropped: it holds it)."""
    if pid_file.exists():
        stop(int(pid_file.read_text()))
        pid_file.unlink()


@pytest.fixture
def own_infrastructure(
    stack: Stack, own_connect: dict[str, str], tmp_path: Path
) -> Iterator[dict[str, str]]:
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
        "OUTBOXKIT_CONNECT_URL": own_connect["url"],
        "CONNECT_PLUGIN_DIR": own_connect["plugins"],
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
        stop_own_connect(Path(own_connect["pid_file"]))  # its connector goes with it
        drop_service(
            stack,
            connector=None,
            slot=settings["OUTBOXKIT_SLOT_NAME"],
            database="shop",
            roles=["shop", cdc_role],
        )
        stack.secrets.file(cdc_role).unlink(missing_ok=True)


def test_the_wheel_installs_and_runs_the_install_page(
    own_infrastructure: dict[str, str], own_connect: dict[str, str], stack: Stack, tmp_path: Path
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
    substitute = {
        r"--packages \S+": f"--jars {jars}",
        RESTART: own_connect["start"],
        **uv_install(wheel.name),
    }
    script.write_text(shell_script(PAGE, own_infrastructure, substitute))
    passfile = str(make_url(stack.database_url()).query["passfile"])
    code, tails = run_session(script, clean_environment(passfile), timeout=600)
    assert code == 0, tails
    output = (work / "session.log").read_text()
    assert "order paid" in output, tails
    connector = own_infrastructure["OUTBOXKIT_CONNECTOR_NAME"]
    assert f"connector {connector}: unchanged" in output, tails  # the second apply
    assert "[ok] connector: " in output and " 0 problem(s)" in output, tails  # the doctor
    assert own_infrastructure["OUTBOXKIT_CDC_PASSWORD_REFERENCE"] in output  # the dry-run's JSON
    assert "holds the CDC role's password itself" not in output, tails  # a reference is set
    cdc_password = stack.secrets.password(own_infrastructure["OUTBOXKIT_CDC_ROLE"])
    assert cdc_password not in output, "a password was printed"
    # The transform ran from the plugin path the page filled, on a worker with nothing of ours.
    libs = Path(tmp_path / "own-connect" / "libs")
    assert not list(libs.glob("outboxkit-*")) and list(libs.glob("debezium-connector-postgres-*"))
    plugin_jars = list(Path(own_connect["plugins"]).rglob("outboxkit-smt-*.jar"))
    assert len(plugin_jars) == 1, plugin_jars
    client = ConnectClient(own_connect["url"])
    try:
        assert SOURCE_POSITION_HEADERS in client.plugins()
    finally:
        client.close()
    # The records of the connector the page's `cdc apply` put name the shop database.
    assert_records_name_their_database(stack, own_infrastructure["OUTBOXKIT_TOPIC_PREFIX"])

    installed = next((work / ".venv" / "lib").glob("python3*/site-packages"))
    (record,) = installed.glob("outboxkit-*.dist-info/RECORD")
    paths = [line.split(",")[0] for line in record.read_text().splitlines()]
    assert top_level([p for p in paths if not p.startswith("../")]) - {"__pycache__"} == TOP_LEVEL
    assert (installed / "spark_consumers" / "submit.py").is_file()
    print(f"wheel built, installed and the page run in {time.monotonic() - started:.0f} s")


def assert_records_name_their_database(stack: Stack, topic_prefix: str) -> None:
    """The shop's order events carry the shop database's identity (Postgres's system identifier
    and the database's name), read here from Postgres itself."""
    engine = create_engine(make_url(stack.database_url()).set(database="shop"))
    try:
        with engine.connect() as conn:
            system_identifier = conn.execute(
                text("SELECT system_identifier FROM pg_control_system()")
            ).scalar_one()
    finally:
        engine.dispose()
    records = read_records(
        stack.bootstrap_servers(), [f"{topic_prefix}order"], until=bool, timeout=60
    )
    for record in records:
        found = [value for name, value in record.headers if name == SOURCE_IDENTITY]
        assert found == [f"{system_identifier}/shop".encode()], record.headers
