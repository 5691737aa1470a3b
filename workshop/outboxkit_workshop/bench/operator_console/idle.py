"""`outboxkit console` in a process of its own, looked at once and then left alone: what it
costs while nobody looks (its CPU, and the queries its database sessions start)."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, pool, text

from outboxkit_workshop.bench.operator_console.seed import CONSUMER, JOB_NAME
from outboxkit_workshop.bench.operator_console.served import page, signed_in
from outboxkit_workshop.demo_console import console_answers
from outboxkit_workshop.devstack.processes import (
    LOOPBACK_ADDRESS,
    free_port,
    start,
    stop,
    wait_until,
)

JOB_MODULE = "bench_console_job"


def job_module(folder: Path, url: str, bootstrap: str, topic: str) -> None:
    """The consumer job `outboxkit console` is started on, as a module in ``folder``."""
    path = folder / f"{JOB_MODULE}.py"
    path.write_text(
        '"""The console benchmark\'s consumer job (`outboxkit dev bench console`)."""\n\n'
        "from spark_consumers.job import Job\n\n\n"
        "def charge(envelope, uow):\n"
        '    raise ValueError("the console benchmark applies nothing")\n\n\n'
        f"job = Job(name={JOB_NAME!r}, topics=({topic!r},), consumer={CONSUMER!r}, "
        f'handlers={{"Charge": charge}}, database_url={url!r}, bootstrap_servers={bootstrap!r})\n'
    )
    path.chmod(0o600)


def idle(
    folder: Path,
    env: dict[str, str],
    url: str,
    password: str,
    seconds: float,
    advance: Callable[[float], None],
) -> dict[str, Any]:
    """`outboxkit console` in its own process, looked at once, then left alone ``seconds``: its
    CPU over that time and the queries its sessions started."""
    port, log = free_port(), folder / "console.log"
    argv = [sys.executable, "-m", "outboxkit.cli", "console", f"{JOB_MODULE}:job"]
    pid = start("console", [*argv, "--port", str(port)], log=log, env=env, cwd=folder)
    address = f"http://{LOOPBACK_ADDRESS}:{port}"
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        wait_until("the console", lambda: console_answers(address), timeout=60, pid=pid, log=log)
        _look_once(address, password)
        with engine.connect() as conn:
            since: datetime = conn.execute(text("SELECT now()")).scalar_one()
        ticks, began = _ticks(pid), time.monotonic()
        time.sleep(seconds)
        used, lasted = _ticks(pid) - ticks, time.monotonic() - began
        advance(seconds)
        sessions, queries = _sessions(engine, since)
    finally:
        stop(pid)
        engine.dispose()
    cpu = used / os.sysconf("SC_CLK_TCK")
    return {
        "seconds": lasted,
        "cpu_seconds": cpu,
        "cpu_percent_of_one_core": 100 * cpu / lasted,
        "database_sessions": sessions,
        "queries_started": queries,
    }


def _look_once(address: str, password: str) -> None:
    """Someone signs in, looks at the overview and the failures, and leaves."""
    with contextlib.closing(signed_in(address, password)) as client:
        page(client, "/", shows=CONSUMER)
        page(client, "/failures", shows="grouped by cause")
    time.sleep(1.0)  # the last answer's thread done


def _sessions(engine: Engine, since: datetime) -> tuple[int, int]:
    """The database's client sessions but this one, and how many started a query since
    ``since``."""
    with engine.connect() as conn:
        sessions, queries = conn.execute(
            text(
                "SELECT count(*), count(*) FILTER (WHERE query_start >= :since) "
                "FROM pg_stat_activity WHERE datname = current_database() "
                "AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
            ),
            {"since": since},
        ).one()
    return int(sessions), int(queries)


def _ticks(pid: int) -> float:
    """utime + stime of process ``pid`` (every thread), in clock ticks."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat.rsplit(")", 1)[1].split()
    return float(fields[11]) + float(fields[12])
