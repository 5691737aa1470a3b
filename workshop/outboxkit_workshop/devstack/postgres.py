"""An embedded PostgreSQL 15 cluster: initdb once, logical WAL, SCRAM passwords; on loopback, or on
its own address of the stack's partitionable network (`outboxkit_workshop.devstack.network`)."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from pathlib import Path

import psycopg
from psycopg import sql

from outboxkit_workshop.devstack.processes import LOOPBACK as LOOPBACK_HOST
from outboxkit_workshop.devstack.processes import Host, StackError, start, wait_until

SUPERUSER = "postgres"
LOOPBACK = LOOPBACK_HOST.address
SERVER_SETTINGS = {
    "listen_addresses": LOOPBACK,
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


def dsn(port: int, passfile: Path, database: str = "postgres", address: str = LOOPBACK) -> str:
    """A libpq connection string for the embedded cluster's superuser (set-up only)."""
    return (
        f"host={address} port={port} user={SUPERUSER} dbname={database} passfile={passfile} "
        "connect_timeout=5"
    )


def url(port: int, database: str, passfile: Path, address: str = LOOPBACK) -> str:
    """The SQLAlchemy URL of one database of the embedded cluster, as the superuser; the
    password is in ``passfile`` (libpq's password file), never in the URL."""
    return f"postgresql+psycopg://{SUPERUSER}@{address}:{port}/{database}?passfile={passfile}"


def initdb(bin_dir: Path, data_dir: Path, log: Path, password: str) -> None:
    """Create the cluster once: password (SCRAM) authentication for every role, replication
    included, the superuser's password being ``password``."""
    if (data_dir / "PG_VERSION").exists():
        return
    user = _run_as()
    data_dir.mkdir(parents=True, exist_ok=True)
    data_dir.chmod(0o700)
    _hand_over(data_dir, user)
    # initdb reads the password from a file its user can read: one beside the new data
    # directory (mode 0600, given to that user), removed once the cluster exists.
    pwfile = data_dir.parent / f".{data_dir.name}.pw"
    fd = os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(password + "\n")
    _hand_over(pwfile, user)
    try:
        _initdb(bin_dir, data_dir, log, pwfile, user)
    finally:
        pwfile.unlink(missing_ok=True)


def _initdb(bin_dir: Path, data_dir: Path, log: Path, pwfile: Path, user: str | None) -> None:
    with log.open("ab") as out:
        result = subprocess.run(
            [
                str(bin_dir / "initdb"),
                "-D",
                str(data_dir),
                "-A",
                "scram-sha-256",
                f"--pwfile={pwfile}",
                "-U",
                SUPERUSER,
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


# Who may log in how: every role with its SCRAM password, on the socket and on loopback, and no
# physical replication at all (Debezium's logical connections match the database lines; a
# physical one would copy every database, and every role's verifier, to a REPLICATION role).
# On the partitionable network, the stack's /24 logs in the same way.
HBA = (
    "# written by outboxkit (workshop/outboxkit_workshop/devstack/postgres.py)\n"
    "local all all scram-sha-256\n"
    "host  all all 127.0.0.1/32 scram-sha-256\n"
    "host  all all ::1/128 scram-sha-256\n"
)


def hba(network: str | None = None) -> str:
    """The access rules; ``network`` (a CIDR): the stack's partitionable network's too."""
    return HBA + (f"host  all all {network} scram-sha-256\n" if network else "")


def _write_hba(data_dir: Path, network: str | None = None) -> None:
    path = data_dir / "pg_hba.conf"
    rules = hba(network)
    if path.exists() and path.read_text() == rules:
        return
    owner = path.stat() if path.exists() else data_dir.stat()
    path.write_text(rules)
    os.chown(path, owner.st_uid, owner.st_gid)
    path.chmod(0o600)


def _trusts(data_dir: Path) -> bool:
    """True for a cluster an earlier version created with trust authentication."""
    hba = data_dir / "pg_hba.conf"
    return hba.exists() and any(
        line.split()[-1:] == ["trust"]
        for line in hba.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    )


def _ready(port: int, passfile: Path, address: str) -> bool:
    try:
        with psycopg.connect(dsn(port, passfile, address=address), autocommit=True) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


def start_server(
    bin_dir: Path,
    data_dir: Path,
    port: int,
    log: Path,
    passfile: Path,
    password: str,
    host: Host = LOOPBACK_HOST,
    network: str | None = None,
) -> int:
    """Start the postmaster on ``host``'s address and ``port`` and wait until it accepts
    queries; return its PID (``network``: the CIDR of the partitionable network it is on).

    A cluster an earlier version created with trust authentication is moved to passwords: the
    superuser gets ``password`` (hashed on the client), then the access rules are replaced."""
    legacy = _trusts(data_dir)
    if not legacy:
        _write_hba(data_dir, network)
    argv = [str(bin_dir / "postgres"), "-D", str(data_dir), "-p", str(port), "-k", str(data_dir)]
    for key, value in {**SERVER_SETTINGS, "listen_addresses": host.address}.items():
        argv += ["-c", f"{key}={value}"]
    pid = start("postgres", argv, log=log, user=_run_as(), host=host)
    address = host.address
    wait_until("postgres", lambda: _ready(port, passfile, address), timeout=60, pid=pid, log=log)
    if legacy:
        with psycopg.connect(dsn(port, passfile, address=address), autocommit=True) as conn:
            verifier = conn.pgconn.encrypt_password(
                password.encode(), SUPERUSER.encode(), b"scram-sha-256"
            ).decode()
            conn.execute(
                sql.SQL("ALTER ROLE {} PASSWORD {}").format(
                    sql.Identifier(SUPERUSER), sql.Literal(verifier)
                )
            )
            _write_hba(data_dir, network)
            conn.execute("SELECT pg_reload_conf()")
    return pid


def create_database(port: int, name: str, passfile: Path, address: str = LOOPBACK) -> None:
    """Create the database if it does not exist."""
    with psycopg.connect(dsn(port, passfile, address=address), autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{name}"')
        # The stack's own database (set-up, tools): no role but the superuser connects.
        conn.execute(f'REVOKE ALL ON DATABASE "{name}" FROM PUBLIC')
