"""Cluster benchmark: what scaling out costs and buys, measured side by side on this machine.

Each shape (Kafka nodes, Spark standalone workers, partitions of the measured topics) gets a
stack of its own in a temporary directory: started, measured, stopped by PID (`Stack.down`).
On each shape:
- the pipeline as `bench pipeline` measures it (the Debezium drain of a backlog alone, and a
  backlog through Debezium, Kafka and the Spark inbox sink with the per-event and the batch
  handler), in a driver process of its own that submits to the shape's Spark (local[2] inside
  the driver, or the stack's standalone master), as a consumer driver does;
- the saga as `bench saga` measures one fixed rate (orders POSTed open-loop for a fixed time,
  POST -> final p50/p99), with its topics created at the shape's partition count.
The machine's load averages and its CPUs' busy share are recorded around every measurement:
other work on the machine moves the figures, and the record says by how much it ran.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from outboxkit_workshop.bench.cluster_report import plural, report
from outboxkit_workshop.bench.report import Progress
from outboxkit_workshop.bench.usage import Watch, rss_mib, stack_nodes
from outboxkit_workshop.devstack.settings import StackSettings
from outboxkit_workshop.devstack.stack import Stack

REPOSITORY = Path(__file__).resolve().parents[3]
# One shape's pipeline measurement, its driver's start included: minutes on a quiet machine,
# over 13 minutes seen with the load average at 20 on 2 cores.
PIPELINE_TIMEOUT_S = 1800


class ClusterBenchError(RuntimeError):
    """The cluster scenario cannot run, or a shape's measurement failed."""


@dataclass(frozen=True)
class Shape:
    """A stack shape: Kafka nodes, Spark standalone workers (0: local[2] inside the driver) and
    the partitions of the measured topics; ``saga``: measure the saga on it too."""

    brokers: int
    spark_workers: int
    partitions: int
    saga: bool = True
    again: bool = False  # the baseline measured again after the others

    @property
    def label(self) -> str:
        spark = "local[2]" if not self.spark_workers else plural(self.spark_workers, "worker")
        shape = f"{plural(self.brokers, 'broker')}, Spark {spark}, {self.partitions} partitions"
        return f"{shape} (again, last)" if self.again else shape

    @property
    def slug(self) -> str:
        slug = f"k{self.brokers}-s{self.spark_workers}-p{self.partitions}"
        return f"{slug}-again" if self.again else slug

    def settings(self, base: StackSettings, stack_dir: Path) -> StackSettings:
        """``base`` in this shape, all embedded, in ``stack_dir``: one Connect worker (the
        connector is one task whatever the group's size) and one process per service."""
        return base.model_copy(
            update={
                "stack_dir": stack_dir,
                "cluster": False,
                "kafka_brokers": self.brokers,
                "connect_workers": 1,
                "spark_workers": self.spark_workers,
                "spark_master": None,
                "service_replicas": 1,
            }
        )


def parse_shape(text: str) -> Shape:
    """``k3-s2-p8`` (3 brokers, 2 Spark workers, 8 partitions); a trailing ``-nosaga`` skips
    the saga on that shape."""
    parts = text.strip().lower().split("-")
    try:
        counts = {p[0]: int(p[1:]) for p in parts if p != "nosaga"}
        return Shape(counts["k"], counts["s"], counts["p"], saga="nosaga" not in parts)
    except (KeyError, ValueError, IndexError) as exc:
        raise ValueError(
            f"shape {text!r}: write k<brokers>-s<spark workers>-p<partitions>"
        ) from exc


# The baseline first; each other shape changes one thing from the one it is compared with.
SHAPES = (
    Shape(1, 0, 4),  # a single node of everything
    Shape(3, 0, 4),  # + brokers (RF 3, min ISR 2)
    Shape(3, 2, 4),  # + a Spark standalone master and 2 workers
    Shape(3, 1, 4, saga=False),  # - one of the workers (the saga at 20/s needs no second)
    Shape(3, 2, 8),  # + partitions
)
QUICK_SHAPES = (Shape(1, 0, 4), Shape(3, 2, 4))


@dataclass(frozen=True)
class Sizes:
    """How much each shape is measured: the pipeline's backlog, repetitions and warm-up
    (events through each query first), and the saga's fixed rate and duration."""

    events: int = 20_000
    reps: int = 2
    warm_up: int = 1000
    saga_rate: float = 20.0
    saga_duration: float = 20.0
    # The baseline's pipeline once more after the other shapes: how far the machine's load
    # alone moved the figures over the run (each shape runs at another time).
    baseline_again: bool = True


DEFAULT = Sizes()
QUICK = Sizes(events=2000, reps=1, warm_up=500, saga_duration=5.0, baseline_again=False)


def plan(shapes: Sequence[Shape], sizes: Sizes) -> list[Shape]:
    """The shapes in the order measured: the baseline (the first) again at the end, its
    pipeline only, when ``sizes`` asks for it and there is more than one shape."""
    if sizes.baseline_again and len(shapes) > 1:
        return [*shapes, dataclasses.replace(shapes[0], saga=False, again=True)]
    return list(shapes)


@contextlib.contextmanager
def shape_stack(shape: Shape, base: StackSettings, root: Path) -> Iterator[Stack]:
    """A stack of ``shape`` in ``root``/<slug>, up for the block, then down by PID."""
    directory = root / shape.slug
    directory.mkdir(parents=True)
    directory.chmod(0o755)  # Postgres runs as another user: it must enter the directory
    stack = Stack(shape.settings(base, directory / "stack"), echo=lambda line: None)
    try:
        stack.up()
        yield stack
    finally:
        stack.down()


def measure_pipeline(stack: Stack, shape: Shape, workdir: Path, sizes: Sizes) -> Any:
    """`cdc.pipeline` on ``stack`` in a driver process of its own (`cluster_driver`), so
    each shape's Spark application starts in a fresh JVM against the shape's master."""
    workdir.mkdir(parents=True, exist_ok=True)
    settings_file, result = workdir / "settings.json", workdir / "pipeline.json"
    settings_file.write_text(stack.settings.model_dump_json())
    options = {
        "settings": settings_file,
        "events": sizes.events,
        "reps": sizes.reps,
        "warm-up": sizes.warm_up,
        "partitions": shape.partitions,
        "result": result,
    }
    argv = [sys.executable, "-m", "outboxkit_workshop.bench.cluster_driver"]
    argv += [arg for name, value in options.items() for arg in (f"--{name}", str(value))]
    pythonpath = os.pathsep.join(p for p in (str(REPOSITORY), os.environ.get("PYTHONPATH")) if p)
    log = workdir / "pipeline-driver.log"
    with log.open("w") as stderr:
        done = subprocess.run(
            argv,
            cwd=REPOSITORY,
            env={**os.environ, "PYTHONPATH": pythonpath},
            stderr=stderr,
            timeout=PIPELINE_TIMEOUT_S,
            check=False,
        )
    if done.returncode != 0:
        tail = "\n".join(log.read_text().splitlines()[-20:])
        raise ClusterBenchError(
            f"{shape.label}: the pipeline driver failed (exit {done.returncode}); {log}:\n{tail}"
        )
    return json.loads(result.read_text())


def measure_saga(stack: Stack, shape: Shape, workdir: Path, sizes: Sizes) -> dict[str, Any]:
    """One fixed rate of `bench saga` on ``stack``, its topics created with the shape's
    partitions before the services' connectors write to them."""
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    from outboxkit.kernel.wire.record import topic_for
    from outboxkit_workshop.bench.saga import fixed_rate
    from outboxkit_workshop.saga import rules
    from outboxkit_workshop.saga_harness.processes import Saga

    prefix = stack.settings.topic_prefix
    topics = [topic_for(t, topic_prefix=prefix) for t in rules.AGGREGATES]
    admin = AdminClient(stack.kafka_client_config())
    wanted = [NewTopic(t, shape.partitions, replication_factor=-1) for t in topics]
    for done in admin.create_topics(wanted).values():
        done.result(30)
    saga = Saga(stack, workdir / "saga", echo=lambda line: None)
    rate, duration = sizes.saga_rate, sizes.saga_duration
    with Progress("saga", int(rate * duration)) as progress:
        try:
            progress.update(f"{shape.label}: saga services, Spark jobs, a warm-up order")
            saga.prepare()
            saga.start_services()
            saga.start_consumers()
            saga.warm_up()
            progress.update(f"{shape.label}: saga at {rate:g}/s for {duration:g} s")
            return dict(fixed_rate(saga, rate, duration, 200, progress))
        finally:
            saga.stop()


def measure_shape(shape: Shape, base: StackSettings, root: Path, sizes: Sizes) -> dict[str, Any]:
    """Start ``shape``'s stack, measure the pipeline (and the saga), stop it."""
    result: dict[str, Any] = {"shape": shape.slug, "label": shape.label, "load": {}}
    say = _say(shape)
    say(f"starting the stack (load {_load()})")
    started = time.perf_counter()
    with shape_stack(shape, base, root) as stack:
        result["stack_up_seconds"] = time.perf_counter() - started
        nodes = stack_nodes(stack)
        result["stack_processes"], result["stack_rss_mib"] = len(nodes), rss_mib(nodes)
        say(f"up in {result['stack_up_seconds']:.0f} s, {len(nodes)} processes; pipeline")
        with Watch() as watch:
            pipeline = measure_pipeline(stack, shape, root / shape.slug / "pipeline", sizes)
        result["pipeline"] = {k: pipeline[k] for k in ("params", "events_per_second", "batches")}
        result["pipeline"]["micro_batch_ms"] = pipeline["micro_batch_ms"]
        result["load"]["pipeline"] = watch.as_dict()
        result["machine"] = pipeline["machine"]
        say(f"pipeline done in {watch.seconds:.0f} s (load {_load()})")
        if shape.saga:
            with Watch() as watch:
                result["saga"] = measure_saga(stack, shape, root / shape.slug, sizes)
            result["load"]["saga"] = watch.as_dict()
            say(f"saga done in {watch.seconds:.0f} s (load {_load()})")
        say("stopping the stack")
    return result


def _say(shape: Shape) -> Any:
    def say(text: str) -> None:
        print(f"[bench] cluster {shape.label}: {text}", flush=True)

    return say


def _load() -> str:
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


def run(
    settings: StackSettings,
    out: Path,
    *,
    shapes: Sequence[Shape] = SHAPES,
    sizes: Sizes = DEFAULT,
    workdir: Path | None = None,
) -> tuple[dict[str, Any], str]:
    """Each shape in its own stack, one after the other; figures and ratios to the first."""
    if settings.database_url or settings.kafka_bootstrap_servers or settings.connect_url:
        raise ClusterBenchError(
            "the cluster scenario starts embedded stacks of its own shapes: unset "
            "OUTBOXKIT_DATABASE_URL, _KAFKA_BOOTSTRAP_SERVERS and _CONNECT_URL to run it"
        )
    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)
        workdir.chmod(0o755)
    root = Path(tempfile.mkdtemp(prefix="okbc-", dir=workdir))  # short: Postgres socket paths
    root.chmod(0o755)
    results = []
    measured = plan(shapes, sizes)
    for n, shape in enumerate(measured, start=1):
        print(f"[bench] cluster shape {n}/{len(measured)}: {shape.label}", flush=True)
        results.append(measure_shape(shape, settings, root, sizes))
    shutil.rmtree(root, ignore_errors=True)  # kept on failure: the stacks' logs are there
    return report(out, results, asdict(sizes))
