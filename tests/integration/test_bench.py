"""The benchmarks run on the real stack at small sizes and report what they measured (figures
are never asserted against thresholds: only that every measurement happened and adds up)."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from outboxkit_workshop.bench import (
    cdc,
    cluster,
    figures,
    inbox,
    operator_console,
    profile,
    scheduled,
    service,
    writes,
)
from outboxkit_workshop.bench.cli import fresh_database
from outboxkit_workshop.devstack.settings import StackSettings
from outboxkit_workshop.devstack.stack import Stack

pytestmark = pytest.mark.integration


def test_outbox_and_inbox_benchmarks_measure_every_variant(stack: Stack, tmp_path: Path) -> None:
    url = fresh_database(stack.database_url())
    data, markdown = writes.run(url, tmp_path, transactions=64, reps=2, writers=(1, 4))
    rates = data["transactions_per_second"]
    # The synchronous and the async variants, side by side at each writer count.
    assert set(writes.ASYNC_VARIANTS) <= set(writes.VARIANTS)
    assert set(rates) == {f"{w} / {v}" for w in (1, 4) for v in writes.VARIANTS}
    assert all(r["samples"] and r["min"] > 0 for r in rates.values())
    assert data["params"]["async_driver"] == "psycopg"  # its async connection
    assert "| 4 | outbox, delete mode |" in markdown and "| 1 | outbox, message mode |" in markdown
    assert "| 4 | async, outbox, delete mode |" in markdown
    assert "| 1 | async, outbox, message mode |" in markdown
    wal = data["wal_bytes_per_transaction"]
    # Every outbox variant writes more WAL than the business row alone on its driver. The WAL
    # position is the cluster's, so other writers (a connector's heartbeat, autovacuum after
    # earlier tests) only ever add to a sample: the least of two samples is the variant's own.
    for w in (1, 4):
        for variant in writes.VARIANTS:
            base = writes.baseline_of(variant)
            if variant != base:
                assert min(wal[f"{w} / {variant}"]) > min(wal[f"{w} / {base}"]), (variant, wal)
    assert all(c[0] > 0 for c in data["client_cpu_us_per_transaction"].values())
    assert Path(data["plots"][0]).stat().st_size > 0
    # The published block and the headline rows show both drivers' ratios.
    block = figures.outbox(data)
    assert (
        "| 4 | async |" in block and "| per event, 1 writer | async | client CPU / WAL |" in block
    )
    assert [r[0] for r in figures._summary_outbox(data)] == [
        "outbox write, delete mode, vs none (1 / 4 writers)",
        "outbox write, AsyncSession, delete mode, vs none (1 / 4 writers)",
    ]

    data, markdown = inbox.run(url, tmp_path, events=400, reps=1, checkpoints=(400, 2000))
    sizes = data["state_size"]
    # The classic inbox keeps a row per message; ours is bounded by partitions x window.
    assert sizes["message-id"][2000]["rows"] == 2000
    assert sizes["inbox"][2000]["rows"] == 2000 + inbox.PARTITIONS
    assert sizes["watermark"][2000]["rows"] == inbox.PARTITIONS
    # With source positions: a row per partition, whatever the message count.
    assert sizes["source positions"][2000]["rows"] == inbox.PARTITIONS
    assert set(data["rows_per_second"]) == set(inbox.VARIANTS)

    data, markdown = profile.run(url, tmp_path, events=400, transactions=50)
    sink, write = data["inbox_sink_seconds"], data["outbox_write_seconds"]
    assert 0 < sink["cpu (profiled)"] <= sink["wall (profiled)"] * 1.05
    assert write["SQLAlchemy (statements, ORM session)"] > 0
    assert "s waiting (" in markdown and "| SQLAlchemy (statements, ORM session) |" in markdown


def test_service_benchmark_measures_the_async_and_sync_routes_side_by_side(
    stack: Stack, tmp_path: Path
) -> None:
    # run() itself checks that every POST created an order of its own (a 201 with a new id)
    # and that the orders database holds a row for each.
    data, markdown = service.run(stack, tmp_path, reps=1, orders=40, clients=(1, 16))
    assert data["clients"] == [1, 16]
    assert set(data["variants"]) == {"async", "sync"}
    for variant, by_clients in data["variants"].items():
        assert set(by_clients) == {"1", "16"}, variant
        for runs in by_clients.values():
            assert len(runs) == 1
            for r in runs:
                assert r["posts_per_second"] > 0 and r["cpu_ms_per_post"] > 0, (variant, r)
                assert r["unavailable"] == 0, (variant, r)  # every POST answered at once
    ratios = data["async_over_sync"]
    assert set(ratios) == {"1", "16"}
    assert all(0 < v < 100 for r in ratios.values() for v in r.values()), ratios
    assert "| 16 | async |" in markdown and "| 16 | sync |" in markdown
    assert "Async / sync" in markdown
    assert json.dumps(data, allow_nan=False)
    # The published block and the headline rows read this shape.
    block = figures.service(data)
    assert "| 16 |" in block and "`./dev.sh bench service --reps 1 --orders 40`" in block
    assert all(row[1].endswith("x sync") for row in figures._summary_service(data))


def test_cdc_benchmark_sees_every_event(stack: Stack, tmp_path: Path) -> None:
    data, _ = cdc.cdc(stack, tmp_path, events=400, reps=1, writers=2)
    rates = data["events_per_second"]
    assert all(r["min"] > 0 for r in rates.values())
    assert data["params"]["record_sizes"][1] > 100  # sized from a real Debezium record
    assert json.dumps(data)  # the report is JSON-ready
    status = stack.connect_client().status(f"{stack.settings.connector_name}-{cdc.DATABASE}")
    assert status is not None and status.running  # resumed after the drain


def test_scheduled_benchmark_times_each_message_and_each_variant(
    stack: Stack, tmp_path: Path
) -> None:
    url = fresh_database(stack.database_url())
    data, markdown = scheduled.run(
        stack, url, tmp_path, rates=(50.0,), seconds=2.0, transactions=20, reps=1
    )
    [run] = data["release_lag"]["50"]
    assert run["messages"] == 100
    # Every message timed once to its release's commit and to Kafka, and released by the
    # benchmark's releaser alone (nothing else releases on its database).
    for hop in ("due_to_committed", "due_to_kafka", "releaser_lag"):
        lag = run[hop]
        assert lag["count"] == 100, hop
        assert lag["p50"] <= lag["p99"] <= lag["max"], hop
    assert run["releaser_lag"]["p50"] >= 0  # released no earlier than due
    per_event = data["us_per_event"]
    assert set(per_event) == {f"{a} {s}" for a in ("publish", "schedule") for s in (1, 10)}
    assert all(v["samples"] and v["min"] > 0 for v in per_event.values())
    assert data["params"]["release"]["batch"] == scheduled.ReleaseSettings().batch
    assert "| 50/s | 100 |" in markdown and "| 10 |" in markdown
    assert json.dumps(data, allow_nan=False)
    assert Path(data["plots"][0]).stat().st_size > 0


def test_console_benchmark_times_each_page_and_the_idle_console(
    stack: Stack, tmp_path: Path
) -> None:
    url = fresh_database(stack.database_url())
    data, markdown = operator_console.run(
        stack, url, tmp_path, parked=2000, partitions=8, samples=3, warm_up=1, idle_seconds=2.0
    )
    p = data["params"]
    # The seeded errors group into one cause each; one parked record in ten waits for a retry.
    assert p["causes"] == len(operator_console.ERRORS) == 20
    assert (p["lagging_partitions"], p["retrying"]) == (4, 200)
    checks = data["checks"]  # the overview read what was seeded
    assert (checks["partitions"], checks["parked"], checks["problems"]) == (8, 2000, [])
    assert set(data["ms"]) == {
        "OverviewReader.read()",
        "GET /",
        "GET /failures",
        "GET /failures/group",
        "GET /events?id=",
    }
    for path, ms in [*data["ms"].items(), *data["overview_parts_ms"].items()]:
        assert len(ms["samples"]) == 3 and 0 < ms["p50"] <= ms["p95"] <= ms["max"], path
    assert len(data["overview_parts_ms"]) == 5 and len(data["heads_read"]["per_read"]) == 3
    # Every measured path's statements were timed, and only theirs.
    assert {s["path"] for s in data["statements"]} == set(data["ms"])
    # Left alone, the console's own process ran and its sessions started no query.
    idle = data["idle"]
    assert idle["seconds"] >= 2.0 and idle["cpu_seconds"] >= 0
    assert idle["queries_started"] == 0
    assert "| the overview page (GET /) |" in markdown and "nobody looking for 2 s" in markdown
    assert json.dumps(data, allow_nan=False)


_PIPELINE_CHILD = """
import json, sys
from pathlib import Path
from outboxkit_workshop.bench import cdc
from outboxkit_workshop.devstack.settings import StackSettings
from outboxkit_workshop.devstack.stack import Stack
stack = Stack(StackSettings(**json.loads(sys.argv[1])), echo=print)
data, _ = cdc.pipeline(stack, Path(sys.argv[2]), events=500, reps=1, flame_events=10)
Path(sys.argv[2], "data.json").write_text(json.dumps(data))
"""


def test_pipeline_benchmark_applies_each_event_once(stack: Stack, tmp_path: Path) -> None:
    # In a process of its own, with its own Spark session: the profilers attach to that JVM,
    # never to the session the other consumer tests share (a JVM the profiler took down would
    # fail them all).
    settings = stack.settings
    shape = {
        "stack_dir": str(settings.stack_dir),
        "connector_name": settings.connector_name,
        "heartbeat_interval_ms": settings.heartbeat_interval_ms,
    }
    subprocess.run(
        [sys.executable, "-c", _PIPELINE_CHILD, json.dumps(shape), str(tmp_path)],
        check=True,
        timeout=600,
    )
    data = json.loads((tmp_path / "data.json").read_text())
    assert data["events_per_second"][cdc.PER_EVENT]["min"] > 0
    assert data["events_per_second"][cdc.BATCH]["min"] > 0
    assert all(n >= 1 for n in data["batches"].values())
    assert all("addBatch" in ms for ms in data["micro_batch_ms"].values())
    latency = data["one_at_a_time"]["latency_seconds"]
    assert len(latency) == 10 and all(0 < s < 60 for s in latency)
    assert data["one_at_a_time"]["median_phase_ms"]["addBatch"] > 0
    # py-spy (the bench extra) followed Spark's JVM to the Python workers that ran the sink;
    # async-profiler (the stack's jars) sampled the driver's JVM.
    assert data["flame_graphs"] == [
        f"pipeline-{kind}-{shape}.{ext}"
        for shape in ("trickle", "drain")
        for kind, ext in (("flame", "svg"), ("jvm", "html"))
    ]
    for name in data["flame_graphs"]:
        graph = (tmp_path / name).read_text()
        if name.endswith(".svg"):  # the workers' processes, under the JVM, were sampled
            assert "pyspark.daemon pyspark.worker" in graph, name
            # a backlog keeps them busy enough that the inbox's apply is in every graph
            assert "apply_partition" in graph or "trickle" in name, name
        else:
            assert "MicroBatchExecution" in graph, name
            assert (tmp_path / name).with_suffix(".collapsed").stat().st_size > 0


@pytest.mark.slow  # two stacks started and stopped in turn: minutes; `bench cluster` runs it all
def test_cluster_benchmark_measures_each_shape_in_its_own_stack(tmp_path: Path) -> None:
    """The cluster scenario's smallest form: Spark inside the driver vs a one-worker standalone
    cluster with twice the partitions, the pipeline only, each shape's stack started and
    stopped in turn (the saga part is `bench saga`'s fixed rate, run by `bench cluster`)."""
    shapes = (cluster.parse_shape("k1-s0-p4-nosaga"), cluster.parse_shape("k1-s1-p8-nosaga"))
    # The postgres user must be able to enter the directory: not under pytest's 0700 tmp.
    workdir = Path(tempfile.mkdtemp(prefix="okbct-"))
    try:
        sizes = cluster.Sizes(events=300, reps=1, warm_up=100, baseline_again=False)
        data, markdown = cluster.run(
            StackSettings(), tmp_path, shapes=shapes, sizes=sizes, workdir=workdir
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    assert [s["shape"] for s in data["shapes"]] == ["k1-s0-p4", "k1-s1-p8"]
    local, standalone = data["shapes"]
    for shape, partitions in ((local, 4), (standalone, 8)):
        rates = shape["pipeline"]["events_per_second"]
        assert set(rates) == {cdc.DRAIN, cdc.PER_EVENT, cdc.BATCH}
        assert all(r["min"] > 0 for r in rates.values())
        assert shape["pipeline"]["params"]["partitions"] == partitions
        assert shape["stack_up_seconds"] > 0 and shape["stack_rss_mib"] > 0
        load = shape["load"]["pipeline"]
        assert len(load["loadavg_before"]) == 3 and 0 < load["cpu_busy_share"] <= 1
        assert 0 < load["cpu_share_of_this_run"] <= load["cpu_busy_share"]
        assert "saga" not in shape
    # The driver submitted to the shape's own master; that stack has a master and a worker more.
    assert local["pipeline"]["params"]["spark_master"].startswith("local")
    assert standalone["pipeline"]["params"]["spark_master"].startswith("spark://127.0.0.1:")
    assert standalone["stack_processes"] == local["stack_processes"] + 2
    assert all(v == 1.0 for v in data["ratios_to_baseline"][0].values() if v is not None)
    assert "| 1 broker, Spark 1 worker, 8 partitions |" in markdown
    assert json.dumps(data, allow_nan=False)
    # Every process of both stacks was stopped: none runs from their directory any more.
    assert not [p for p in Path("/proc").glob("[0-9]*/cmdline") if _mentions(p, workdir)]


def _mentions(cmdline: Path, directory: Path) -> bool:
    try:
        return str(directory).encode() in cmdline.read_bytes()
    except OSError:  # the process ended meanwhile
        return False


def test_cluster_shapes_parse_and_ratios_divide_by_the_baseline() -> None:
    assert cluster.parse_shape("k3-s2-p8") == cluster.Shape(3, 2, 8)
    assert cluster.parse_shape("K1-s0-p4-nosaga") == cluster.Shape(1, 0, 4, saga=False)
    with pytest.raises(ValueError, match="k<brokers>"):
        cluster.parse_shape("3 brokers")
    assert cluster.SHAPES[0] == cluster.Shape(1, 0, 4)  # the baseline: a single node
    # ... measured again last, its pipeline only, to show how far the machine's load moved
    shapes = cluster.plan(cluster.SHAPES, cluster.DEFAULT)
    assert shapes[-1] == cluster.Shape(1, 0, 4, saga=False, again=True)
    assert shapes[-1].slug == "k1-s0-p4-again" and len(shapes) == len(cluster.SHAPES) + 1
    assert cluster.plan(cluster.SHAPES, cluster.QUICK) == list(cluster.SHAPES)
    settings = cluster.Shape(3, 2, 8).settings(StackSettings(), Path("/tmp/x"))
    assert (settings.kafka_brokers, settings.spark_workers, settings.connect_workers) == (3, 2, 1)

    def shape(drain: float, p50: float | None) -> dict[str, object]:
        rates = {k: {"median": drain} for k in (cdc.DRAIN, cdc.PER_EVENT, cdc.BATCH)}
        saga = {"achieved_rate": 20.0, "p50": p50, "p99": 2 * p50} if p50 else None
        return {"pipeline": {"events_per_second": rates}, "saga": saga}

    from outboxkit_workshop.bench.cluster_report import ratios

    base, faster, no_saga = ratios([shape(100, 1.0), shape(150, 0.5), shape(50, None)])
    assert set(base.values()) == {1.0}
    assert faster["Debezium drain"] == 1.5 and faster["saga p50 s"] == 0.5
    assert no_saga["pipeline, batch"] == 0.5 and math.isnan(no_saga["saga p99 s"])
