"""One sample of everything a soak watches on the running stack and saga: each process's memory,
descriptors, threads and CPU since the sample before (with its descendants), the replication
slots' lag and the WAL, the inbox and outbox tables of each service database, the folders that
hold data (the consumers' checkpoints, Kafka's log, Postgres's data), and the orders so far. A
sample is a flat mapping ``family:label`` -> value (`outboxkit_workshop.saga_harness.trend`)."""

from __future__ import annotations

import datetime
import functools
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

from inbox import tables as inbox_tables
from outbox.table import outbox_scheduled_table, outbox_table
from outboxkit.kernel.engines import engine_for
from outboxkit_workshop.devstack.stack import Stack
from outboxkit_workshop.devstack.state import EMBEDDED
from outboxkit_workshop.saga_harness import proc
from outboxkit_workshop.saga_harness.processes import Saga
from outboxkit_workshop.saga_harness.trend import CPU_SETTLE_SECONDS

Sample = dict[str, float]
# The inbox's bookkeeping (watermarks, the id window, parked records) and the outbox tables.
TABLES = tuple(
    t.name
    for t in (
        inbox_tables.watermarks,
        inbox_tables.recent_ids,
        inbox_tables.parked,
        outbox_table,
        outbox_scheduled_table,
    )
)
SLOTS = text(
    "SELECT slot_name, pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn) "
    "FROM pg_replication_slots WHERE confirmed_flush_lsn IS NOT NULL"
)
LIMITS = text(
    "SELECT pg_size_bytes(current_setting('max_wal_size')) "
    "+ pg_size_bytes(current_setting('wal_keep_size')), "
    "pg_size_bytes(current_setting('wal_segment_size')), "
    "pg_size_bytes(current_setting('shared_memory_size'))"  # the main shared memory area
)
ORDERS = text(
    "SELECT count(*), count(final_at), percentile_cont(0.5) WITHIN GROUP "
    "(ORDER BY extract(epoch FROM final_at - created_at)) "
    "FILTER (WHERE final_at >= now() - make_interval(secs => :interval)) "
    "FROM orders WHERE created_at >= :since"
)


class Sampler:
    """Samples ``stack`` and ``saga``; orders count from ``since`` (the run's start); a
    process tree's CPU is ``cpu``, or ``cpu warming`` while a JVM in it has run less than
    ``cpu_settle_seconds`` (a consumer driver restarted, a Spark executor started anew under
    its worker, a broker restarted)."""

    def __init__(
        self,
        stack: Stack,
        saga: Saga,
        since: datetime.datetime,
        cpu_settle_seconds: float = CPU_SETTLE_SECONDS,
    ) -> None:
        self.stack, self.saga, self.since = stack, saga, since
        self.cpu_settle_seconds = cpu_settle_seconds
        self.clock = time.monotonic
        # The stack's superuser: the slots, the WAL directory and its settings.
        self.admin: Engine = engine_for(stack.database_url(), "once")
        # Its Postgres nodes: their shared memory sampled apart (their shared buffers).
        self.postgres = {node.name for node in stack.state.postgres.nodes}
        # Each process's (PID, when, CPU seconds of its tree) at the sample before.
        self._cpu: dict[str, tuple[int, float, float]] = {}

    def close(self) -> None:
        self.admin.dispose()

    def processes(self) -> dict[str, int]:
        """Each named process of the stack (its embedded nodes, read again each time: a fault's
        repair starts them with new PIDs) and of the saga, by name: its PID."""
        state = self.stack.state
        engines = (state.postgres, state.broker, state.connect, state.spark)
        found = {
            node.name: node.pid
            for engine in engines
            if engine.mode == EMBEDDED
            for node in engine.nodes
            if node.pid
        }
        return {**found, **dict(self.saga.pids)}

    def sample(self, interval: float) -> Sample:
        """Everything, now; ``interval``: the seconds the latency figure looks back. What cannot
        be read this time (Postgres down, a process being restarted) is left out."""
        found: Sample = {}
        parent_of = proc.parents()
        for name, pid in self.processes().items():
            pids = proc.tree(pid, parent_of)
            found |= self._cpu_since(name, pid, proc.cpu_seconds(pids), self._warming(pids))
            used = proc.usage(pids)
            if used is not None:
                if name in self.postgres and used.shared_mib is not None:
                    found[f"shared:{name}"] = used.shared_mib  # its shared buffers
                found |= {
                    f"rss:{name}": used.private_mib,
                    f"fds:{name}": used.fds,
                    f"threads:{name}": used.threads,
                }
        found |= self._folders()
        found |= _read(self._postgres)
        for service, engine in self.saga.engines.items():
            found |= _read(functools.partial(_tables, engine, service))
        found |= _read(lambda: self._orders(interval))
        return found

    def _warming(self, pids: list[int]) -> bool:
        """True while a JVM among ``pids`` has run less than `cpu_settle_seconds`."""
        for pid in pids:
            if proc.command(pid) == "java":
                age = proc.age(pid)
                if age is not None and age < self.cpu_settle_seconds:
                    return True
        return False

    def _cpu_since(self, name: str, pid: int, spent: float, warming: bool) -> Sample:
        """The share of one core (%) the process's tree used since the sample before, as
        ``cpu warming:name`` while a JVM in it is ``warming`` up, else as ``cpu:name``; nothing
        the first time, nor when it was started again meanwhile (a fault's repair: its count
        began again)."""
        now = self.clock()
        before, self._cpu[name] = self._cpu.get(name), (pid, now, spent)
        if before is None or before[0] != pid or spent < before[2] or now <= before[1]:
            return {}
        family = "cpu warming" if warming else "cpu"
        return {f"{family}:{name}": 100 * (spent - before[2]) / (now - before[1])}

    def _folders(self) -> Sample:
        checkpoints = self.saga.workdir / "checkpoints"
        size, files = proc.folder(checkpoints)
        found = {"folder bytes:checkpoints": float(size), "folder files:checkpoints": float(files)}
        for name in ("kafka", "pgdata", "spark"):
            if (self.stack.dir / name).exists():
                found[f"folder bytes:{name}"] = float(proc.folder(self.stack.dir / name)[0])
        return found

    def _postgres(self) -> Sample:
        with self.admin.connect() as conn:
            lags = conn.execute(SLOTS).all()
            wal = conn.execute(text("SELECT coalesce(sum(size), 0) FROM pg_ls_waldir()"))
            found = {"folder bytes:pg_wal": float(wal.scalar_one())}
        return found | {f"slot lag:{slot}": float(lag) for slot, lag in lags}

    def limits(self) -> tuple[float, float, float]:
        """(max_wal_size + wal_keep_size, one WAL segment, the shared memory area) in bytes."""
        with self.admin.connect() as conn:
            kept, segment, shared = conn.execute(LIMITS).one()
        return float(kept), float(segment), float(shared)

    def _orders(self, interval: float) -> Sample:
        with self.saga.engines["orders"].connect() as conn:
            row = conn.execute(ORDERS, {"since": self.since, "interval": interval}).one()
        placed, final, p50 = row
        found = {"orders:placed": float(placed), "orders:final": float(final)}
        return found | ({"latency:p50": float(p50)} if p50 is not None else {})


def _tables(engine: Engine, service: str) -> Sample:
    """Size (bytes, with indexes and TOAST) and rows of each inbox and outbox table."""
    found: Sample = {}
    with engine.connect() as conn:
        for table in TABLES:
            size, rows = conn.execute(
                text(f'SELECT pg_total_relation_size(:t), (SELECT count(*) FROM "{table}")'),
                {"t": table},
            ).one()
            found[f"table bytes:{service}.{table}"] = float(size)
            found[f"table rows:{service}.{table}"] = float(rows)
    return found


def _read(read: Callable[[], Any]) -> Sample:
    """``read()``, or nothing while the database cannot answer (Postgres crashed and restarting:
    the sample goes on without these figures)."""
    try:
        found: Sample = read()
    except DBAPIError:
        return {}
    return found
