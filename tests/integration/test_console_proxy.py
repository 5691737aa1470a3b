"""The console behind a real nginx, configured with the block its how-to page gives ("Beyond
loopback"): actions from the console's own pages pass the Origin check through the proxy, and
the sign-in log and limit see the client's address, not the proxy's. A proxy that rewrites
Host to the console's own address makes the console refuse every action, as the page warns."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cdc.endpoints import Endpoints
from outboxkit.console import build_console
from outboxkit.console.auth import user_line
from outboxkit.kernel.kafka.security import PLAINTEXT
from outboxkit.settings import Settings
from outboxkit_workshop.devstack.processes import free_port
from outboxkit_workshop.devstack.stack import Stack
from tests.serving import serving

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "how-to" / "console.md"
PASSWORD = "olive-" + uuid.uuid4().hex
CLIENT = "127.0.0.3"  # the browser's address: another loopback address than the proxy's


def documented_block() -> str:
    """The nginx `location` block of the console's how-to page."""
    found = re.search(r"```nginx\n(.*?)```", PAGE.read_text(), re.S)
    assert found is not None, "the console's how-to page has no nginx block"
    return found.group(1)


@pytest.fixture(scope="module")
def console(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """The console on a loopback port, served by uvicorn as `outboxkit console` serves it."""
    users = tmp_path_factory.mktemp("console") / "users"
    users.write_text(user_line("olive", "operator", PASSWORD) + "\n")
    settings = Settings(console_users_file=users)
    endpoints = Endpoints(
        stack.database_url(), stack.bootstrap_servers(), stack.connect_url(), PLAINTEXT
    )
    built = build_console(settings, [], endpoints)
    try:
        with serving(built.app) as port:
            yield port
    finally:
        built.close()


@contextlib.contextmanager
def nginx(work: Path, location: str) -> Iterator[int]:
    """nginx on a free loopback port with ``location`` as its only location, until the block
    ends; its port."""
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    assert Path(binary).exists(), "nginx is missing: scripts/install-system.sh installs it"
    work.mkdir()
    port = free_port()
    temp = "\n".join(
        f"    {kind}_temp_path {work / kind};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    (work / "nginx.conf").write_text(
        ("user root;\n" if os.geteuid() == 0 else "")
        + f"worker_processes 1;\ndaemon off;\npid {work / 'nginx.pid'};\n"
        + f"error_log {work / 'error.log'} warn;\nevents {{ worker_connections 64; }}\n"
        + f"http {{\n    access_log off;\n{temp}\n"
        + f"    server {{\n        listen 127.0.0.1:{port};\n{location}\n    }}\n}}\n"
    )
    process = subprocess.Popen(
        [binary, "-p", str(work), "-c", str(work / "nginx.conf")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            assert time.monotonic() < deadline, (work / "error.log").read_text()
            try:
                httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.05)
        yield port
    finally:
        process.terminate()
        process.wait(10)


def signed_in(port: int) -> tuple[httpx.Client, str]:
    """A browser's session through the proxy at ``port``: the client, and its form token."""
    transport = httpx.HTTPTransport(local_address=CLIENT)
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", transport=transport)
    answer = client.post("/login", data={"name": "olive", "password": PASSWORD})
    assert answer.status_code == 303, answer.text[:500]
    page = client.get("/actions").text
    found = re.search(r'name="csrf" value="([^"]+)"', page) or re.search(
        r'<meta name="csrf" content="([^"]+)"', page
    )
    assert found is not None, page[:2000]
    return client, found.group(1)


def acted(port: int) -> httpx.Response:
    """Signed in through the proxy at ``port``, an action posted from the console's own page,
    as a browser sends it (with Origin)."""
    client, csrf = signed_in(port)
    return client.post(
        "/act/redrive-group",
        data={"csrf": csrf, "consumer": "nobody-watched", "cause": "x", "request": "r1"},
        headers={"origin": f"http://127.0.0.1:{port}"},
    )


def test_behind_the_documented_nginx_actions_pass_and_the_client_is_seen(
    console: int, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    location = documented_block().replace("127.0.0.1:8089", f"127.0.0.1:{console}")
    with nginx(tmp_path / "nginx", location) as port:
        answer = acted(port)
        # past the Origin check: the action itself refuses (no job of that consumer)
        assert answer.status_code == 409, answer.text[:2000]
        assert "the console watches no job of consumer" in answer.text
        with caplog.at_level(logging.WARNING, logger="outboxkit.console"):
            wrong = httpx.Client(
                base_url=f"http://127.0.0.1:{port}",
                transport=httpx.HTTPTransport(local_address=CLIENT),
            )
            assert wrong.post("/login", data={"name": "olive", "password": "no"}).status_code
        assert f"sign-in of 'olive' from {CLIENT} failed" in caplog.text, caplog.text


def test_a_proxy_that_rewrites_host_has_every_action_refused(console: int, tmp_path: Path) -> None:
    location = (
        "location / {\n"
        f"    proxy_pass http://127.0.0.1:{console};\n"
        f"    proxy_set_header Host 127.0.0.1:{console};\n"
        "}\n"
    )
    with nginx(tmp_path / "nginx", location) as port:
        answer = acted(port)
        assert answer.status_code == 403, answer.text[:2000]
        assert "came from another site" in answer.text
