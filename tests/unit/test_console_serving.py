"""How `outboxkit console` serves: on loopback by default; beyond it only over HTTPS (its own
certificate) or where it is told TLS ends in front of it; the session cookie Secure whenever
it serves HTTPS itself. Runs the command as a user does, in a process of its own."""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from outboxkit.commands.console import loopback
from outboxkit.commands.errors import USAGE
from outboxkit.console.auth import user_line
from outboxkit_workshop.devstack.processes import free_port as unused_port
from tests.unit.test_cli_errors import one_line, outboxkit

JOB = "outboxkit_workshop.saga.jobs:orders"


@pytest.fixture
def free_port() -> int:
    """A loopback port nothing listens on."""
    return unused_port()


def job_env(port: int) -> dict[str, str]:
    """The saga's orders job, its database and Kafka absent (nothing here needs them)."""
    return {
        "ORDERS_DATABASE_URL": f"postgresql+psycopg://app@127.0.0.1:{port}/app",
        "ORDERS_KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{port}",
    }


def users(tmp_path: Path) -> Path:
    path = tmp_path / "users"
    path.write_text(user_line("olive", "operator", "pw") + "\n")
    return path


def test_loopback_addresses() -> None:
    assert loopback("127.0.0.1") and loopback("::1") and loopback("localhost")
    assert not loopback("0.0.0.0") and not loopback("10.0.0.5") and not loopback("console.internal")


def test_plain_http_beyond_loopback_is_refused_unless_tls_ends_in_front(
    tmp_path: Path, free_port: int
) -> None:
    env = {**job_env(free_port), "OUTBOXKIT_CONSOLE_USERS_FILE": str(users(tmp_path))}
    done = outboxkit(tmp_path, "console", JOB, "--host", "0.0.0.0", **env)
    line = one_line(done, USAGE)
    assert "would take passwords over plain HTTP on 0.0.0.0" in line, line
    assert "OUTBOXKIT_CONSOLE_TLS_CERT_FILE" in line and "OUTBOXKIT_CONSOLE_INSECURE_HTTP" in line
    half = outboxkit(
        tmp_path, "console", JOB, OUTBOXKIT_CONSOLE_TLS_CERT_FILE=str(tmp_path / "c"), **env
    )
    assert "needs both" in one_line(half, USAGE)
    absent = outboxkit(
        tmp_path,
        *("console", JOB),
        OUTBOXKIT_CONSOLE_TLS_CERT_FILE=str(tmp_path / "c"),
        OUTBOXKIT_CONSOLE_TLS_KEY_FILE=str(tmp_path / "k"),
        **env,
    )
    assert "is not a readable file" in one_line(absent, USAGE)


def test_the_console_serves_https_with_its_certificate_and_a_secure_cookie(
    tmp_path: Path, free_port: int
) -> None:
    cert, key = tmp_path / "console.crt", tmp_path / "console.key"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"),
            *("-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
    )
    port = unused_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOXKIT_")}
    env |= job_env(free_port) | {
        "OUTBOXKIT_STACK_DIR": str(tmp_path / "stack"),
        "OUTBOXKIT_CONSOLE_USERS_FILE": str(users(tmp_path)),
        "OUTBOXKIT_CONSOLE_TLS_CERT_FILE": str(cert),
        "OUTBOXKIT_CONSOLE_TLS_KEY_FILE": str(key),
        "OUTBOXKIT_CONSOLE_PORT": str(port),
    }
    served = subprocess.Popen(
        [sys.executable, "-m", "outboxkit.cli", "console", JOB],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        trusted = ssl.create_default_context(cafile=str(cert))
        with httpx.Client(base_url=f"https://127.0.0.1:{port}", verify=trusted) as client:
            deadline = time.monotonic() + 60
            while True:
                try:
                    assert client.get("/healthz").status_code == 200
                    break
                except httpx.TransportError:
                    assert served.poll() is None and time.monotonic() < deadline
                    time.sleep(0.2)
            signed = client.post("/login", data={"name": "olive", "password": "pw"})
            assert signed.status_code == 303
            cookie = signed.headers["set-cookie"].lower()
            assert "secure" in cookie and "httponly" in cookie and "samesite=strict" in cookie
        with pytest.raises(httpx.TransportError):  # no plain HTTP on the port
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
    finally:
        served.send_signal(signal.SIGINT)
        out, _ = served.communicate(timeout=30)
    assert f"console: https://127.0.0.1:{port}/" in out
