"""Timing the console: each path's milliseconds taken in turns, every SQL statement it runs (and
the plans of the slow ones), and the overview's parts one by one."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, event

from outboxkit_workshop.bench.report import percentile
from outboxkit_workshop.bench.usage import Watch


def quantiles(samples: Sequence[float]) -> dict[str, Any]:
    """p50, p95 and max of ``samples`` (milliseconds), with the samples."""
    return {
        "p50": percentile(samples, 0.5),
        "p95": percentile(samples, 0.95),
        "max": max(samples),
        "samples": list(samples),
    }


class Statements:
    """Every SQL statement ``engines`` run while attached, timed by what was being measured
    (``path``), with the parameters of its slowest run (to explain it)."""

    def __init__(self, engines: Sequence[Engine]) -> None:
        self.engines = list(engines)
        self.path = ""
        self.times: dict[tuple[str, str], list[float]] = {}
        self.slowest: dict[str, tuple[float, Any, Engine]] = {}
        self._lock = threading.Lock()

    def _before(self, conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        conn.info.setdefault("bench_started", []).append(time.perf_counter())

    def _after(self, conn: Any, cursor: Any, statement: str, parameters: Any, *rest: Any) -> None:
        ms = 1000 * (time.perf_counter() - conn.info["bench_started"].pop())
        sql = " ".join(statement.split())
        if not self.path:  # a warm-up, or not measured
            return
        with self._lock:
            self.times.setdefault((self.path, sql), []).append(ms)
            if ms > self.slowest.get(sql, (-1.0, None, None))[0]:
                self.slowest[sql] = (ms, parameters, conn.engine)

    @contextlib.contextmanager
    def attached(self) -> Iterator[Statements]:
        for engine in self.engines:
            event.listen(engine, "before_cursor_execute", self._before)
            event.listen(engine, "after_cursor_execute", self._after)
        try:
            yield self
        finally:
            for engine in self.engines:
                event.remove(engine, "before_cursor_execute", self._before)
                event.remove(engine, "after_cursor_execute", self._after)

    def summary(self) -> list[dict[str, Any]]:
        """Per measured path and statement: calls, p50 and max ms; slowest first."""
        rows = [
            {
                "path": path,
                "sql": sql,
                "calls": len(ms),
                "p50_ms": percentile(ms, 0.5),
                "max_ms": max(ms),
            }
            for (path, sql), ms in self.times.items()
        ]
        return sorted(rows, key=lambda r: -r["p50_ms"])

    def explain(self, slow_ms: float) -> dict[str, str]:
        """EXPLAIN (ANALYZE, BUFFERS) of every statement at least ``slow_ms`` at its median,
        with the parameters of its slowest run."""
        plans: dict[str, str] = {}
        for row in self.summary():
            sql = row["sql"]
            if (
                row["p50_ms"] < slow_ms
                or sql in plans
                or not sql.lstrip().upper().startswith(("SELECT", "WITH"))
            ):
                continue
            _, parameters, engine = self.slowest[sql]
            raw = engine.raw_connection()
            try:
                cursor = raw.cursor()
                cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, parameters)
                plans[sql] = "\n".join(str(r[0]) for r in cursor.fetchall())
                raw.rollback()
            finally:
                raw.close()
        return plans


def timed(call: Callable[[], Any]) -> float:
    """Milliseconds ``call`` took."""
    began = time.perf_counter()
    call()
    return 1000 * (time.perf_counter() - began)


def interleaved(
    paths: dict[str, Callable[[], Any]],
    samples: int,
    warm_up: int,
    statements: Statements | None,
    advance: Callable[[float], None],
) -> dict[str, list[float]]:
    """Milliseconds of each path, ``samples`` times after ``warm_up`` untimed, taking turns."""
    found: dict[str, list[float]] = {name: [] for name in paths}
    for n in range(warm_up + samples):
        for name, call in paths.items():
            if statements is not None:
                statements.path = name if n >= warm_up else ""
            ms = timed(call)
            if n >= warm_up:
                found[name].append(ms)
            advance(1)
    if statements is not None:
        statements.path = ""
    return found


def overview_parts(
    console: Any, job: Any, endpoints: Any, samples: int, advance: Callable[[float], None]
) -> dict[str, list[float]]:
    """The overview's reads one by one, as `OverviewReader` makes them, on clients of their
    own: the consumer's rows, Kafka's offsets of each partition, the heads of the partitions
    behind, the databases' rows, Connect's connectors."""
    from outboxkit.console.overview import Heads
    from outboxkit.kernel.kafka.offsets import PartitionOffsets
    from outboxkit.kernel.kafka.security import client_config

    client = client_config(job.bootstrap_servers, job.kafka_security, job.kafka_options)
    options = {k: v for k, v in client.items() if k != "bootstrap.servers"}
    offsets = PartitionOffsets(client["bootstrap.servers"], options=options, timeout=1.0)
    heads = Heads(client)
    try:
        return interleaved(_parts(console, endpoints, offsets, heads), samples, 1, None, advance)
    finally:
        offsets.close()
        heads.close()


def _parts(console: Any, endpoints: Any, offsets: Any, heads: Any) -> dict[str, Callable[[], Any]]:
    """Each of the overview's reads as a call, over the partitions the consumer has rows of."""
    from outboxkit.console import reads

    watched = console.reader.watched[0]
    databases = list(console.reader.databases.values())
    with watched.engine.connect() as conn:
        rows = reads.consumer_rows(conn, watched.consumer)
    lagging = _lagging(rows.partitions, offsets)

    def consumer_rows() -> None:
        with watched.engine.connect() as conn:
            reads.consumer_rows(conn, watched.consumer)

    def kafka_offsets() -> None:
        for p in rows.partitions:
            offsets.bounds(p.topic, p.partition)

    def databases_rows() -> None:
        for engine in databases:
            with engine.connect() as conn:
                reads.database_rows(conn)

    return {
        "the consumer's rows (SQL)": consumer_rows,
        f"Kafka's offsets, {len(rows.partitions)} partitions": kafka_offsets,
        f"heads of the {len(lagging)} partitions behind": lambda: heads.times(lagging),
        "the databases' rows (SQL), once": databases_rows,
        "Kafka Connect's connectors": lambda: _connectors(endpoints),
    }


def _lagging(partitions: Sequence[Any], offsets: Any) -> list[tuple[str, int, int]]:
    """The partitions behind Kafka's end, each with the offset of its oldest record not applied."""
    bounds = {(p.topic, p.partition): offsets.bounds(p.topic, p.partition) for p in partitions}
    return [
        (p.topic, p.partition, p.watermark + 1)
        for p in partitions
        if (b := bounds[(p.topic, p.partition)]) is not None and b[1] > p.watermark + 1
    ]


def _connectors(endpoints: Any) -> None:
    """Connect's connectors, each one's status and config, as the overview reads them."""
    client = endpoints.connect(timeout=3)
    for name in client.connectors():
        client.status(name)
        client.get_config(name)


def heads_of(consumer: Any) -> list[Any]:
    """A consumer's partitions behind whose oldest record not applied has a time (its head)."""
    return [p for p in consumer.partitions if p.lag and p.waited is not None]


@dataclass
class Measured:
    """What the console in this process gave: each path's milliseconds, the overview's parts',
    the heads each overview read had, the last read, the statements (the slow ones' plans) and
    the machine's load meanwhile."""

    ms: dict[str, list[float]]
    parts: dict[str, list[float]]
    heads: list[int]
    last: Any
    statements: Statements
    plans: dict[str, str]
    load: Watch
