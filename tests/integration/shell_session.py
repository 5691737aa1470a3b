"""What the tests that run a page as a shell session share (the README's quickstart, the install
page): running the script with its background processes stopped afterwards, and removing what
the page created on the session stack (connector, slot, database with its publication, roles)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from cdc.preflight import drop_slot
from outboxkit_workshop.devstack.stack import Stack

LOGS = ("session.log", "service.log", "consumer.log")


def run_session(script: Path, env: dict[str, str], timeout: float) -> tuple[int, str]:
    """Run ``script`` with bash in its folder, output in ``session.log`` there; then stop what
    it left in the background (uvicorn, the consumer driver) by its process group. Returns the
    exit code and the tails of the session's logs."""
    work = script.parent
    with (work / "session.log").open("w") as out:
        shell = subprocess.Popen(
            ["bash", str(script)],
            cwd=work,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            code = shell.wait(timeout=timeout)
        finally:
            stop_group(shell.pid)
    tails = "\n".join(
        f"--- {name}\n" + "\n".join(p.read_text().splitlines()[-40:])
        for name in LOGS
        if (p := work / name).exists()
    )
    return code, tails


def stop_group(pid: int, grace: float = 10) -> None:
    """SIGTERM to the process group of ``pid``, SIGKILL to what is left after ``grace`` s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if not group_alive(pid):
                return
            time.sleep(0.2)


def group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (a zombie, not yet reaped, does not)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def drop_service(
    stack: Stack, *, connector: str | None, slot: str, database: str, roles: list[str]
) -> None:
    """Remove a service the page created: its connector on the stack's Connect (None: it ran
    elsewhere, stopped already), its slot, its database (with the publication in it) and its
    roles."""
    if connector is not None:
        stack.connect_client().delete(connector)
    server = create_engine(
        make_url(stack.database_url()).set(database="postgres"), isolation_level="AUTOCOMMIT"
    )
    deadline = time.monotonic() + 20
    try:
        with server.connect() as conn:
            while True:  # the walsender may take a moment to let the slot go
                try:
                    exists = "SELECT 1 FROM pg_replication_slots WHERE slot_name = :s"
                    if conn.execute(text(exists), {"s": slot}).first():
                        drop_slot(conn, slot)
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
            conn.execute(text(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))
            conn.execute(text("DROP ROLE IF EXISTS " + ", ".join(f'"{r}"' for r in roles)))
    finally:
        server.dispose()
