"""The operator console beside the demo's saga (`outboxkit dev demo --console`): `outboxkit
console` on the saga's three consumer jobs, run as an operator would run it (its own process,
the jobs' settings from the services' environment, the endpoints from the local stack's
record), with a users file of one operator whose generated password is kept in a 0600 file."""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from outboxkit.console.auth import user_line
from outboxkit_workshop.devstack.processes import (
    LOOPBACK_ADDRESS,
    free_port,
    start,
    stop,
    wait_until,
)
from outboxkit_workshop.saga.jobs import ALL as JOBS

OPERATOR = "demo"


@dataclass(frozen=True)
class DemoConsole:
    """The running console: its address, its operator and the file holding the password."""

    url: str
    user: str
    password_file: Path
    log: Path


@contextmanager
def demo_console(workdir: Path, env: dict[str, str], root: Path) -> Iterator[DemoConsole]:
    """The console on the saga's jobs for the block, then stopped (by its PID)."""
    workdir.mkdir(parents=True, exist_ok=True)
    password = secrets.token_urlsafe(12)
    password_file, users = workdir / "console-password", workdir / "console-users"
    for path, text in (
        (password_file, password),
        (users, user_line(OPERATOR, "operator", password)),
    ):
        path.write_text(text + "\n")
        path.chmod(0o600)
    port, log = free_port(), workdir / "console.log"
    console_env = {**env, "OUTBOXKIT_CONSOLE_USERS_FILE": str(users)}
    argv = [sys.executable, "-m", "outboxkit.cli", "console", *JOBS, "--port", str(port)]
    pid = start("console", argv, log=log, env=console_env, cwd=root)
    url = f"http://{LOOPBACK_ADDRESS}:{port}"
    try:
        wait_until("the console", lambda: console_answers(url), timeout=60, pid=pid, log=log)
        yield DemoConsole(url + "/", OPERATOR, password_file, log)
    finally:
        stop(pid)


def console_answers(url: str) -> bool:
    """Whether the console at ``url`` answers its health check."""
    try:
        return httpx.get(url + "/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def wait_for_person(prompt: str) -> None:
    """Wait until the person at the terminal presses Enter (or Ctrl-C); at once without one."""
    if not os.isatty(0):
        return
    try:
        input(prompt)
    except (EOFError, KeyboardInterrupt):
        return
