"""An embedded PostgreSQL 15 cluster: initdb once, logical WAL, loopback only."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from pathlib import Path

import psycopg

from devstack.processes import StackError, start, wait_until

SERVER_SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "wal_level": "logical",
    "max_replication_slots": "20",
    "max_wal_senders": "20",
    "max_connections": "200",
    "shared_buffers": "256MB",
}


def _run_as() -> str | None:
    """initdb refuses to run as root: use the 'postgres' system user then."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError as exc:
        raise StackError(
            "running as root needs the 'postgres' system user (created by apt-get install "
            "postgresql-15), or run outboxkit as a non-root user"
        ) from exc
    return "postgres"


def _hand_over(path: Path, user: str | None) -> None:
    """Give ``path`` to the server's user and make sure every parent can be traversed."""
    if user is None:
        return
    info = pwd.getpwnam(user)
    os.chown(path, info.pw_uid, info.pw_gid)
    for parent in path.resolve().parents:
        mode = parent.stat().st_mode
        if not mode & 0o001:
            raise StackError(
                f"the 'postgres' user cannot enter {parent} (mode {oct(mode & 0o777)}): "
                "put the stack directory (OUTBOXKIT_STACK_DIR) somewhere world-traversable"
            )


def dsn(port: int, database: str = "postgres") -> str:
    """A libpq connection string for the embedded cluster."""
    return f"host=127.0.0.1 port={port} user=postgres dbname={database} connect_timeout=5"


def url(port: int, database: str) -> str:
    """The SQLAlchemy URL of one database of the embedded cluster."""
    return f"postgresql+psycopg://postgres@127.0.0.1:{port}/{database}"


def initdb(bin_dir: Path, data_dir: Path, log: Path) -> None:
    """Create the cluster once (trust auth on loopback)."""
    if (data_dir / "PG_VERSION").exists():
        return
    user = _run_as()
    data_dir.mkdir(parents=True, exist_ok=True)
    data_dir.chmod(0o700)
    _hand_over(data_dir, user)
    with log.open("ab") as out:
        result = subprocess.run(
            [
                str(bin_dir / "initdb"),
                "-D",
                str(data_dir),
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--no-instructions",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            user=user,
            check=False,
        )
    if result.returncode != 0:
        shutil.rmtree(data_dir, ignore_errors=True)
        raise StackError(f"initdb failed (exit {result.returncode}); see {log}")


def _ready(port: int) -> bool:
    try:
        with psycopg.connect(dsn(port), autocommit=True) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


def start_server(bin_dir: Path, data_dir: Path, port: int, log: Path) -> int:
    """Start the postmaster on ``port`` and wait until it accepts queries; return its PID."""
    argv = [str(bin_dir / "postgres"), "-D", str(data_dir), "-p", str(port), "-k", str(data_dir)]
    for key, value in SERVER_SETTINGS.items():
        argv += ["-c", f"{key}={value}"]
    pid = start("postgres", argv, log=log, user=_run_as())
    wait_until("postgres", lambda: _ready(port), timeout=60, pid=pid, log=log)
    return pid


def create_database(port: int, name: str) -> None:
    """Create the database if it does not exist."""
    with psycopg.connect(dsn(port), autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{name}"')
