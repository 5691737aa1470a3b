"""The README's quickstart (README.md, section ``quickstart``, which docs/getting-started.md
includes) runs as written, on a clean database of the session stack: its blocks in order, as
one shell session, from the repository's venv (`.venv` linked into a folder outside the
repository; test_wheel_install.py covers a clean venv).

What it substitutes: the settings block's values (same names) for the session stack's
endpoints; its own database and role for ``shop`` (the install page's test uses ``shop``) and a
free port for 8000; and it sets what the quickstart leaves at its defaults to its own names
(CDC role, connector, server, slot, publication, topic prefix), so that it shares nothing with
the stack's own connector. Spark runs ``local[1]``. What the quickstart created is removed."""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from outboxkit_workshop.devstack.stack import Stack
from tests.doc_snippets import ROOT, shell_script
from tests.integration.shell_session import drop_service, run_session

pytestmark = [pytest.mark.integration, pytest.mark.spark]

PAGE = ROOT / "README.md"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass(frozen=True)
class Quickstart:
    """The quickstart's settings for the session stack, the names it leaves at their defaults
    set to its own, and its database's (and owner's) name."""

    settings: dict[str, str]
    isolation: dict[str, str]
    database: str


@pytest.fixture
def quickstart(stack: Stack, tmp_path: Path) -> Iterator[Quickstart]:
    """The session stack as the quickstart's services; what it created is removed afterwards."""
    tag = uuid.uuid4().hex[:6]
    admin = make_url(stack.database_url())
    database, cdc_role = f"quickstart_{tag}", f"quickstart_cdc_{tag}"
    settings = {
        "PGADMIN": f"postgresql://{admin.username}@127.0.0.1:{admin.port}",
        "OUTBOXKIT_DATABASE_URL": f"postgresql+psycopg://{database}@127.0.0.1:{admin.port}/{database}",
        "OUTBOXKIT_DATABASE_PASSWORD_FILE": str(tmp_path / "shop.password"),
        "OUTBOXKIT_KAFKA_BOOTSTRAP_SERVERS": stack.bootstrap_servers(),
        "OUTBOXKIT_CONNECT_URL": stack.connect_url(),
        "OUTBOXKIT_CDC_PASSWORD_FILE": str(tmp_path / "cdc.password"),
    }
    for name in ("DATABASE_URL", "DATABASE_PASSWORD_FILE", "KAFKA_BOOTSTRAP_SERVERS"):
        settings[f"SHOP_{name}"] = settings[f"OUTBOXKIT_{name}"]
    isolation = {
        "OUTBOXKIT_CDC_ROLE": cdc_role,
        "OUTBOXKIT_CONNECTOR_NAME": f"quickstart-{tag}",
        "OUTBOXKIT_SERVER_NAME": f"quickstart_{tag}",
        "OUTBOXKIT_SLOT_NAME": f"quickstart_{tag}",
        "OUTBOXKIT_PUBLICATION_NAME": f"quickstart_{tag}",
        "OUTBOXKIT_TOPIC_PREFIX": f"quickstart{tag}.event.",
        "SHOP_TOPIC_PREFIX": f"quickstart{tag}.event.",
    }
    try:
        yield Quickstart(settings, isolation, database)
    finally:
        drop_service(
            stack,
            connector=isolation["OUTBOXKIT_CONNECTOR_NAME"],
            slot=isolation["OUTBOXKIT_SLOT_NAME"],
            database=database,
            roles=[database, cdc_role],
        )


def test_the_readme_quickstart_runs(quickstart: Quickstart, stack: Stack, tmp_path: Path) -> None:
    started = time.monotonic()
    database = quickstart.database
    substitute = {
        r"\bROLE shop\b": f"ROLE {database}",
        r"\bDATABASE shop OWNER shop\b": f"DATABASE {database} OWNER {database}",
        r'"\$PGADMIN/shop"': f'"$PGADMIN/{database}"',
        r"\b8000\b": str(free_port()),
    }
    work = tmp_path / "work"
    work.mkdir()
    (work / ".venv").symlink_to(ROOT / ".venv")
    script = work / "quickstart.sh"
    script.write_text(
        shell_script(
            PAGE,
            quickstart.settings,
            substitute,
            within="quickstart",
            isolation=quickstart.isolation,
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOXKIT_")}
    env.pop("PYTHONPATH", None)
    env |= {
        "PGPASSFILE": str(make_url(stack.database_url()).query["passfile"]),
        "OUTBOXKIT_SPARK_MASTER": "local[1]",
        "OUTBOXKIT_CACHE_DIR": str(stack.settings.cache_dir),  # Spark's Kafka connector jars
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    code, tails = run_session(script, env, timeout=300)
    assert code == 0, tails
    output = (work / "session.log").read_text()
    assert "order paid" in output, tails
    # Without a password reference, `cdc apply` says the password is in the connector's config
    assert "set OUTBOXKIT_CDC_PASSWORD_REFERENCE" in output, tails
    print(f"README quickstart run in {time.monotonic() - started:.0f} s")
