"""CDC and pipeline benchmarks on a stack (embedded or external, from settings).

cdc: events/s from commit to Kafka through Debezium's outbox EventRouter,
- streaming: writers commit one event per transaction while the connector runs; the rate is
  events / (last event seen in Kafka - first commit);
- backlog drain: the connector is paused, the events are committed, the connector resumed; the
  rate is events / (last event seen in Kafka - resume);
- raw produce: a confluent-kafka producer sends the same number of records of the same size to
  the same broker (acknowledged, acks=all), the ceiling the broker allows this client.

pipeline: outbox -> Debezium -> Kafka -> Spark (Kafka connector, inbox sink) -> Postgres,
events / (last business row committed - resume) for a backlog, next to the Debezium drain alone
of the same backlog (measured on a topic no query reads), interleaved per repetition. Spark's own
per-micro-batch durations say where the pipeline's time goes.

Every measurement uses a topic of its own (a fresh aggregate type), created with the saga's
partition count before the first event, so counts start at zero.
"""

from __future__ import annotations

import contextlib
import os
import random
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from sqlalchemy import Engine, create_engine, func, select
from sqlalchemy.orm import Session

from cdc.config import topic_for
from outbox import at_commit
from outbox.publish import MODES, Outbox
from outboxkit_workshop.bench.flame import jvm_recording, recording
from outboxkit_workshop.bench.report import (
    Progress,
    bar_plot,
    describe,
    machine,
    markdown_table,
    ratio_rows,
    spread,
)
from outboxkit_workshop.devstack.artifacts import profiler_jar
from outboxkit_workshop.devstack.stack import Stack

PARTITIONS = 4
DATABASE = "outboxkit_bench_cdc"
PAYLOAD_PAD = "x" * 120  # payloads of about 200 bytes, like a small business event


@dataclass
class Seen:
    """Counts the records of one topic as they arrive, from the beginning, in a thread."""

    bootstrap: str
    topic: str
    partitions: int = PARTITIONS
    count: int = 0
    last_at: float = 0.0
    sample: tuple[int, int, int] | None = None  # key, value, headers bytes of one record
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Seen:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 50,
            }
        )
        consumer.assign([TopicPartition(self.topic, p, -2) for p in range(self.partitions)])

        def loop() -> None:
            try:
                while not self._stop.is_set():
                    for message in consumer.consume(1000, timeout=0.05):
                        if message.error():
                            continue
                        self.count += 1
                        self.last_at = time.perf_counter()
                        if self.sample is None:
                            raw = message.headers() or []
                            pairs = raw.items() if isinstance(raw, dict) else raw
                            headers = sum(len(k) + len(v or b"") for k, v in pairs)
                            self.sample = (
                                len(message.key() or b""),
                                len(message.value() or b""),
                                headers,
                            )
            finally:
                consumer.close()

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(10)

    def wait(self, n: int, timeout: float, advance: Callable[[int], None]) -> float:
        """Block until ``n`` records were seen; returns the time the last one arrived."""
        deadline, reported = time.monotonic() + timeout, 0
        while self.count < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.topic}: {self.count}/{n} records after {timeout:.0f}s")
            advance(self.count - reported)
            reported = self.count
            time.sleep(0.02)
        advance(n - reported)
        return self.last_at


@dataclass
class Bench:
    """The benchmark's database and connector on ``stack``."""

    stack: Stack
    partitions: int = PARTITIONS  # of each topic it creates
    url: str = ""
    engine: Engine | None = None
    connector: str = ""
    created_topics: list[str] = field(default_factory=list)

    def __enter__(self) -> Bench:
        self.url = self.stack.add_service(DATABASE)
        self.connector = f"{self.stack.settings.connector_name}-{DATABASE}"
        self.engine = at_commit.attach(create_engine(self.url, pool_size=4, max_overflow=0))
        return self

    def __exit__(self, *exc: object) -> None:
        if self.created_topics:
            admin = AdminClient({"bootstrap.servers": self.stack.bootstrap_servers()})
            for done in admin.delete_topics(self.created_topics).values():
                with contextlib.suppress(Exception):  # a broker that cannot delete keeps them
                    done.result(30)
        if self.engine is not None:
            self.engine.dispose()

    @property
    def bootstrap(self) -> str:
        return self.stack.bootstrap_servers()

    def new_topic(self, label: str) -> tuple[str, str]:
        """A fresh aggregate type and its topic, created with ``partitions`` partitions."""
        aggregate_type = f"bench_{label}_{uuid.uuid4().hex[:8]}"
        topic = topic_for(aggregate_type, topic_prefix=self.stack.settings.topic_prefix)
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        new = NewTopic(topic, self.partitions, replication_factor=-1)  # the brokers' default
        admin.create_topics([new])[topic].result(30)
        self.created_topics.append(topic)
        return aggregate_type, topic

    def write(
        self,
        aggregate_type: str,
        n: int,
        *,
        writers: int = 1,
        per_transaction: int = 1,
        mode: str = "delete",
    ) -> float:
        """Commit ``n`` outbox events; returns the time the last commit returned."""
        assert self.engine is not None
        engine, outbox = self.engine, Outbox(mode)

        def work(w: int) -> None:
            ks = range(w * n // writers, (w + 1) * n // writers)  # every k in 0..n-1 once
            for first in range(0, len(ks), per_transaction):
                with Session(engine) as session, session.begin():
                    for k in ks[first : first + per_transaction]:
                        outbox.publish(
                            session,
                            aggregate_type=aggregate_type,
                            aggregate_id=f"agg-{k % 64}",
                            event_type="Tick",
                            payload={"n": k, "pad": PAYLOAD_PAD},
                        )

        with ThreadPoolExecutor(writers) as pool:
            list(pool.map(work, range(writers)))  # re-raises a writer's error here
        return time.perf_counter()

    # -- measurements -----------------------------------------------------------------------
    def streaming(
        self, n: int, writers: int, advance: Callable[[int], None], mode: str = "delete"
    ) -> dict[str, float]:
        aggregate_type, topic = self.new_topic("stream")
        with Seen(self.bootstrap, topic, self.partitions) as seen:
            started = time.perf_counter()
            committed = self.write(aggregate_type, n, writers=writers, mode=mode)
            last = seen.wait(n, 300, advance)
        return {
            "commit_rate": n / (committed - started),
            "kafka_rate": n / (last - started),
            "lag_after_last_commit": last - committed,
        }

    def backlog(self, aggregate_type: str, n: int) -> None:
        """Pause the connector and commit ``n`` events (100 per transaction)."""
        self.stack.connect_client().pause(self.connector)
        self.write(aggregate_type, n, per_transaction=100)

    def drain(self, n: int, advance: Callable[[int], None]) -> tuple[float, tuple[int, int, int]]:
        """events/s of Debezium draining a backlog of ``n`` into Kafka; and a record's size."""
        aggregate_type, topic = self.new_topic("drain")
        self.backlog(aggregate_type, n)
        with Seen(self.bootstrap, topic, self.partitions) as seen:
            resumed = time.perf_counter()
            self.stack.connect_client().resume(self.connector)
            last = seen.wait(n, 300, advance)
        assert seen.sample is not None
        return n / (last - resumed), seen.sample

    def produce(
        self, n: int, sample: tuple[int, int, int], advance: Callable[[int], None]
    ) -> float:
        """events/s of a plain producer sending ``n`` records of ``sample``'s sizes."""
        _, topic = self.new_topic("produce")
        key_len, value_len, header_len = sample
        value = b"v" * value_len
        headers: list[tuple[str, str | bytes | None]] = [("id", b"h" * max(0, header_len - 2))]
        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all"})
        started = time.perf_counter()
        for i in range(n):
            key = f"agg-{i % 64}".encode().ljust(key_len, b"_")
            while True:
                try:
                    producer.produce(topic, value, key, headers=headers)
                    break
                except BufferError:
                    producer.poll(0.05)
            if i % 1000 == 999:
                producer.poll(0)
                advance(1000)
        if producer.flush(120) != 0:
            raise RuntimeError("raw produce: records still unacknowledged after 120 s")
        advance(n % 1000)
        return n / (time.perf_counter() - started)


def cdc(
    stack: Stack, out: Path, *, events: int = 20_000, reps: int = 3, writers: int = 4
) -> tuple[dict[str, Any], str]:
    rates: dict[str, list[float]] = {
        **{f"commit (writers alone), {mode} mode": [] for mode in MODES},
        **{f"streaming, commit -> Kafka, {mode} mode": [] for mode in MODES},
        "backlog drain -> Kafka": [],
        "raw produce": [],
    }
    lags: dict[str, list[float]] = {mode: [] for mode in MODES}
    total = events * (2 + len(MODES)) * reps
    with Bench(stack) as bench, Progress("cdc", total) as progress:
        for rep in range(reps):
            for mode in MODES:
                progress.update(f"cdc streaming, {mode} mode ({rep + 1}/{reps})")
                s = bench.streaming(events, writers, progress.advance, mode)
                rates[f"commit (writers alone), {mode} mode"].append(s["commit_rate"])
                rates[f"streaming, commit -> Kafka, {mode} mode"].append(s["kafka_rate"])
                lags[mode].append(s["lag_after_last_commit"])
            progress.update(f"cdc backlog drain ({rep + 1}/{reps})")
            drain, sample = bench.drain(events, progress.advance)
            rates["backlog drain -> Kafka"].append(drain)
            progress.update(f"cdc raw produce ({rep + 1}/{reps})")
            rates["raw produce"].append(bench.produce(events, sample, progress.advance))
        found = machine(bench.url)
    rows = ratio_rows(rates, "raw produce")
    md = (
        "### CDC: events/s from commit to Kafka\n\n"
        f"{events:,} outbox events per measurement (about {sample[1]} bytes of value, "
        f"{PARTITIONS} partitions), {reps} repetitions interleaved. Streaming: {writers} writers, "
        "one event per transaction, rate from the first commit to the last event seen in Kafka "
        "(the writers' own commit rate is the first row). Drain: the backlog committed while the "
        "connector was paused (delete mode), rate from resume to the last event in Kafka. Raw "
        "produce: confluent-kafka to the same broker, acks=all. Ratio = median / raw produce. "
        "Median lag between the last commit and its event in Kafka while streaming: "
        + ", ".join(f"{mode} mode {statistics.median(v):.2f} s" for mode, v in lags.items())
        + ".\n"
        + describe(found)
        + "\n"
        + markdown_table(["path", "min events/s", "median", "max", "ratio"], rows)
    )
    data = {
        "scenario": "cdc",
        "params": {"events": events, "reps": reps, "writers": writers, "record_sizes": sample},
        "machine": found,
        "events_per_second": {k: spread(v) | {"samples": v} for k, v in rates.items()},
        "streaming_lag_seconds": lags,
        "plots": [
            str(bar_plot(out / "cdc.png", "CDC events/s vs raw produce", rates, ylabel="events/s"))
        ],
    }
    return data, md + "\n![CDC events/s](cdc.png)\n"


# -- pipeline ---------------------------------------------------------------------------------
DRAIN = "Debezium drain alone"
PER_EVENT = "outbox -> Spark inbox, per-event handler"
BATCH = "outbox -> Spark inbox, batch handler"


def _durations(progress: list[Any]) -> dict[str, float]:
    """Total milliseconds per micro-batch phase over batches that read input."""
    totals: dict[str, float] = {}
    for p in progress:
        if p.numInputRows:
            for phase, ms in p.durationMs.items():
                totals[phase] = totals.get(phase, 0) + ms
    return totals


def _median_phases(progress: list[Any]) -> dict[str, float]:
    """Median milliseconds of each micro-batch phase over batches that read input."""
    read = [p.durationMs for p in progress if p.numInputRows]
    return (
        {phase: statistics.median(d.get(phase, 0) for d in read) for phase in read[0]}
        if read
        else {}
    )


def pipeline(
    stack: Stack,
    out: Path,
    *,
    events: int = 20_000,
    reps: int = 3,
    trigger: float = 0.5,
    session: Any = None,
    partitions: int = PARTITIONS,
    warm_up: int = 1000,
    flame_events: int = 0,
) -> tuple[dict[str, Any], str]:
    """Measure the pipeline with the one-event and the batch handler API; in ``session`` when
    given (left running), else in its own (OUTBOXKIT_SPARK_MASTER, else local[2]); on topics of
    ``partitions`` partitions, after ``warm_up`` events through each query. With
    ``flame_events``, then the batch handler's job takes that many events one at a time (the
    latency from commit to the inbox and the phases of its one-record micro-batches), then a
    backlog, each under py-spy and async-profiler (where installed) for flame graphs."""
    from inbox.handlers import Handlers
    from outboxkit_workshop.bench.inbox import (
        bench_metadata,
        effects,
        record_effect,
        record_effects,
    )
    from outboxkit_workshop.devstack.artifacts import cached_spark_jars
    from spark_consumers.job import Job
    from spark_consumers.runner import start_job
    from spark_consumers.session import build_session

    handlers: dict[str, Handlers] = {PER_EVENT: record_effect, BATCH: record_effects}
    rates: dict[str, list[float]] = {DRAIN: [], PER_EVENT: [], BATCH: []}
    phases: dict[str, dict[str, float]] = {}
    batches: dict[str, int] = {}
    flames: list[str] = []
    small: dict[str, Any] = {"latency": [], "phases": {}}
    with (
        Bench(stack, partitions) as bench,
        Progress("pipeline", 3 * events * reps + 2 * warm_up) as progress,
    ):
        assert bench.engine is not None
        engine = bench.engine
        bench_metadata.create_all(engine)
        jobs: dict[str, tuple[str, Job]] = {}
        for n, (variant, handler) in enumerate(handlers.items()):
            aggregate_type, topic = bench.new_topic(f"pipeline{n}")
            jobs[variant] = (
                aggregate_type,
                Job(
                    name=f"bench_pipeline_{n}",
                    topics=(topic,),
                    consumer=f"bench-{aggregate_type}",
                    handlers=handler,
                    database_url=bench.url,
                    bootstrap_servers=bench.bootstrap,
                    # The window follows the source, as a deployment sets it.
                    exactly_once_source=stack.settings.connect_exactly_once,
                ),
            )

        def applied() -> int:
            with engine.connect() as conn:
                return int(conn.execute(select(func.count()).select_from(effects)).scalar_one())

        progress.update("pipeline: starting Spark")
        own_session = session is None
        session = session or build_session(
            "outboxkit-bench", jars=cached_spark_jars(stack.settings.cache_dir)
        )
        master = session.sparkContext.master
        with tempfile.TemporaryDirectory(prefix="outboxkit-bench-") as checkpoint:
            queries = {
                variant: start_job(
                    session, job, checkpoint=Path(checkpoint), trigger_seconds=trigger
                )
                for variant, (_, job) in jobs.items()
            }
            try:
                base = applied()
                warm: dict[str, int] = {}
                for variant, (aggregate_type, _) in jobs.items():
                    progress.update(
                        f"pipeline: warm-up, {variant} ({warm_up:,} events through Spark)"
                    )
                    bench.write(aggregate_type, warm_up, per_transaction=100)
                    base = wait_applied(applied, base + warm_up, queries[variant], progress.advance)
                warm = {v: _last_input_batch(q, rows=warm_up) for v, q in queries.items()}
                for rep in range(reps):
                    progress.update(f"pipeline: Debezium drain alone ({rep + 1}/{reps})")
                    rates[DRAIN].append(bench.drain(events, progress.advance)[0])
                    for variant, (aggregate_type, _) in jobs.items():
                        progress.update(f"pipeline: {variant} ({rep + 1}/{reps})")
                        bench.backlog(aggregate_type, events)
                        resumed = time.perf_counter()
                        stack.connect_client().resume(bench.connector)
                        base = wait_applied(
                            applied, base + events, queries[variant], progress.advance
                        )
                        rates[variant].append(events / (time.perf_counter() - resumed))
                # Batches after the warm-up read only the measured backlogs (the drain-alone
                # topics are not subscribed); Spark keeps the last 100 progress reports, and
                # reports a batch only after its commit log, which can lag the applied rows.
                for variant, query in queries.items():
                    measured = _reported(query, warm[variant])
                    batches[variant] = sum(1 for p in measured if p.numInputRows)
                    phases[variant] = _durations(measured)
                aggregate_type = jobs[BATCH][0]
                pacing = random.Random(7)

                def trickle() -> None:  # the saga's kind of load: one event per micro-batch
                    for _ in range(flame_events):
                        time.sleep(pacing.uniform(0, 2 * trigger))  # any phase of the trigger
                        before = applied()
                        committed = bench.write(aggregate_type, 1)
                        while applied() == before:  # polled finely: the latency is the figure
                            if time.perf_counter() - committed > 120:
                                wait_applied(applied, before + 1, queries[BATCH], lambda _: None)
                            time.sleep(0.005)
                        small["latency"].append(time.perf_counter() - committed)

                def drain() -> None:
                    bench.backlog(aggregate_type, events)
                    stack.connect_client().resume(bench.connector)

                shapes = (("trickle", trickle, flame_events), ("drain", drain, events))
                jar = profiler_jar(stack.settings.cache_dir)
                driver = int(session.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
                for name, work, n in shapes if flame_events else ():
                    last = max((p.batchId for p in queries[BATCH].recentProgress), default=-1)
                    svg = out / f"pipeline-flame-{name}.svg"
                    html = out / f"pipeline-jvm-{name}.html"
                    progress.update(f"pipeline: flame graphs, batch handler, {name}")
                    with (
                        recording(os.getpid(), svg, subprocesses=True) as graph,
                        jvm_recording(jar, driver, html, f"Spark driver JVM, {name}") as jvm,
                    ):
                        work()
                        base = wait_applied(applied, base + n, queries[BATCH], lambda _: None)
                    flames += [g.name for g in (graph, jvm) if g is not None and g.exists()]
                    if name == "trickle":
                        small["phases"] = _median_phases(_reported(queries[BATCH], last))
            finally:
                for query in queries.values():
                    query.stop()
                if own_session:
                    session.stop()
        with engine.begin() as conn:
            conn.execute(effects.delete())
        found = machine(bench.url)
    rows = ratio_rows(rates, DRAIN)
    phase_rows = []
    for variant, durations in phases.items():
        total = durations.get("triggerExecution", 0) or 1
        phase_rows += [
            [variant, phase, f"{ms / 1000:.1f}", f"{100 * ms / total:.0f}%"]
            for phase, ms in sorted(durations.items(), key=lambda kv: -kv[1])
            if phase != "triggerExecution"
        ]
    md = (
        "### Pipeline: outbox -> Debezium -> Kafka -> Spark -> inbox\n\n"
        f"A backlog of {events:,} events (committed while the connector was paused) drained "
        f"through the whole pipeline: rate from resume to the last business row committed by "
        f"the inbox sink; next to the Debezium drain alone of the same backlog to a topic no "
        f"query reads. {reps} repetitions interleaved, {partitions} partitions, Spark {master}, "
        f"trigger {trigger} s, "
        "Spark's Kafka connector (read_committed). Ratio = median / Debezium drain.\n"
        + describe(found)
        + "\n"
        + markdown_table(["path", "min events/s", "median", "max", "ratio"], rows)
        + "\nWhere a micro-batch's time goes (batches with input: "
        + ", ".join(f"{v} {n}" for v, n in batches.items())
        + "; Spark's durationMs; addBatch is the inbox sink on the executors):\n\n"
        + markdown_table(["variant", "phase", "seconds", "share of trigger time"], phase_rows)
    )
    if small["latency"]:
        latency = sorted(small["latency"])
        shown = ("triggerExecution", "addBatch", "walCommit", "commitOffsets", "latestOffset")
        md += (
            f"\nOne event at a time ({len(latency)} events, each committed at a random moment "
            "once the last was applied; a micro-batch of one record each), batch handler: "
            "commit -> applied by the inbox "
            f"p50 {statistics.median(latency):.2f} s, "
            f"p90 {latency[int(0.9 * (len(latency) - 1))]:.2f} s; their micro-batches' median "
            + ", ".join(f"{k} {small['phases'].get(k, 0):.0f} ms" for k in shown)
            + ".\n"
        )
    if flames:
        md += (
            "\nFlame graphs of the batch handler's job, one event at a time "
            f"({flame_events} events), then a backlog of {events:,}: py-spy's (`.svg`: CPU "
            "samples of this process, the Spark driver's Python, and of the Python workers "
            "under Spark's JVM, each under its process) and async-profiler's of the Spark "
            "driver's JVM (`.html`: every Java thread; in local mode the executors' tasks run "
            "in it too): " + ", ".join(f"[`{name}`]({name})" for name in flames) + "\n"
        )
    data = {
        "scenario": "pipeline",
        "params": {
            "events": events,
            "reps": reps,
            "trigger_seconds": trigger,
            "partitions": partitions,
            "spark_master": master,
        },
        "machine": found,
        "events_per_second": {k: spread(v) | {"samples": v} for k, v in rates.items()},
        "micro_batch_ms": phases,
        "batches": batches,
        "flame_graphs": flames,
        "one_at_a_time": {
            "latency_seconds": small["latency"],
            "median_phase_ms": small["phases"],
        },
        "plots": [
            str(
                bar_plot(
                    out / "pipeline.png",
                    "Pipeline events/s vs Debezium drain alone",
                    rates,
                    ylabel="events/s",
                )
            )
        ],
    }
    return data, md + "\n![pipeline events/s](pipeline.png)\n"


def _last_input_batch(query: Any, rows: int, timeout: float = 60) -> int:
    """The id of the last batch with input, once the batches reported hold ``rows`` rows (a new
    query's warm-up). A report of an idle trigger may carry the id the next batch will run
    under, so only batches with input mark where the warm-up ends."""
    deadline = time.monotonic() + timeout
    while True:
        read = [p for p in query.recentProgress if p.numInputRows]
        if sum(p.numInputRows for p in read) >= rows or time.monotonic() > deadline:
            return max((p.batchId for p in read), default=-1)
        time.sleep(0.2)


def _reported(query: Any, after: int, timeout: float = 60) -> list[Any]:
    """The query's progress reports of batches after ``after``, once one with input is in and
    no batch is running."""
    deadline = time.monotonic() + timeout
    while True:
        measured = [p for p in query.recentProgress if p.batchId > after]
        idle = not query.status.get("isTriggerActive", False)
        if (idle and any(p.numInputRows for p in measured)) or time.monotonic() > deadline:
            return measured
        time.sleep(0.2)


def wait_applied(
    applied: Callable[[], int],
    target: int,
    query: Any,
    advance: Callable[[int], None],
    timeout: float = 600,
) -> int:
    """Poll the business table until it holds ``target`` rows; a failed query raises."""
    deadline, last = time.monotonic() + timeout, applied()
    while last < target:
        if query.exception() is not None:
            raise RuntimeError(f"the pipeline query failed: {query.exception()}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"pipeline: {last}/{target} rows after {timeout:.0f}s")
        time.sleep(0.05)
        now = applied()
        advance(now - last)
        last = now
    if last > target:
        raise RuntimeError(f"pipeline: {last} rows for {target} events (applied twice?)")
    return last
