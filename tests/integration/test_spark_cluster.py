"""A Spark standalone cluster from PySpark's own files (no Kafka stack): a job's tasks run in
executor JVMs under both workers, never in the driver, and stopping by PID leaves no executor.

The driver runs in its own process (this module run with ``-m``): one Python process holds at
most one SparkContext, and other tests' session may already hold this process's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest

from outboxkit_workshop.devstack import spark
from outboxkit_workshop.devstack.processes import alive, free_port, stop, wait_until

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
WORKERS = 2
PARTITIONS = 8
ARROW_ROWS = 10_000


@dataclass(frozen=True)
class Cluster:
    master_port: int
    master_webui_port: int
    worker_pids: tuple[int, ...]
    worker_ports: tuple[int, ...]
    master_pid: int


def lineage(_: object = None) -> list[int]:
    """This Python worker's PID, then its parent's (os.getppid()), and so on up the tree."""
    time.sleep(0.2)  # long enough that both executors take tasks
    chain = [os.getpid(), os.getppid()]
    while chain[-1] > 1 and len(chain) < 12:
        chain.append(spark.parent_pid(chain[-1]))
    return chain


def arrow_lineage(batches: Iterable[Any]) -> Iterator[Any]:
    """mapInArrow: the rows of each Arrow batch and the lineage of the Python worker reading it."""
    import pyarrow as pa

    for batch in batches:
        yield pa.RecordBatch.from_pydict({"rows": [batch.num_rows], "lineage": [lineage()]})


def rss_mb(pid: int) -> int:
    """The resident memory of a process in MiB (0 when it has gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    kib = next((line.split()[1] for line in status.splitlines() if line.startswith("VmRSS")), "0")
    return int(kib) // 1024


def drive(master: str, worker_pids: list[int]) -> dict[str, Any]:
    """The driver's side: run the jobs on ``master``, note the executors of each worker."""
    from spark_consumers.session import build_session
    from tests.integration import test_spark_cluster as job  # pickled by reference: executors
    # must import this module from the repository

    started = time.monotonic()
    session = build_session("outboxkit-cluster-test", master=master)
    timings = {"session_s": time.monotonic() - started}
    try:
        context = session.sparkContext
        # The scheduler would start on the first executor to register: wait for one per worker.
        status = context._jsc.sc().getExecutorMemoryStatus  # the driver's block manager + executors
        deadline = time.monotonic() + 120
        while status().size() < len(worker_pids) + 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        timings["executors_s"] = time.monotonic() - started
        tasks = context.parallelize(range(PARTITIONS), PARTITIONS).map(job.lineage).collect()
        timings["first_job_s"] = time.monotonic() - started
        frame = session.range(0, ARROW_ROWS, numPartitions=4)
        arrow = frame.mapInArrow(job.arrow_lineage, "rows long, lineage array<long>").collect()
        executors = {pid: [asdict(e) for e in spark.executors_of(pid)] for pid in worker_pids}
        memory = {e["pid"]: rss_mb(e["pid"]) for found in executors.values() for e in found}
    finally:
        session.stop()
    return {
        "driver": os.getpid(),
        "tasks": tasks,
        "arrow": [[row["rows"], list(row["lineage"])] for row in arrow],
        "executors": executors,
        "executor_rss_mb": memory,
        "timings": timings,
    }


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A master and two 1-core workers on free loopback ports; stopped by PID afterwards."""
    logs = tmp_path / "logs"
    master_port, master_webui_port = free_port(), free_port()
    pids: list[int] = []
    try:
        started = time.monotonic()
        master_pid = spark.start_master(
            tmp_path / "master", master_port, master_webui_port, logs / "master.log"
        )
        pids.append(master_pid)
        print(f"master ready in {time.monotonic() - started:.1f}s")
        ports = tuple((free_port(), free_port()) for _ in range(WORKERS))
        for n, (port, webui_port) in enumerate(ports):
            pids.append(
                spark.start_worker(
                    spark.master_url(master_port),
                    tmp_path / f"worker-{n}",
                    port,
                    webui_port,
                    logs / f"worker-{n}.log",
                    master_webui_port=master_webui_port,
                    wait=False,  # both JVMs start side by side
                )
            )
        for n, (port, _) in enumerate(ports):
            wait_until(
                f"spark worker {n}",
                lambda port=port: spark.worker_ready(master_webui_port, port),
                timeout=120,
                pid=pids[1 + n],
                log=logs / f"worker-{n}.log",
            )
        print(f"master and {WORKERS} workers ready in {time.monotonic() - started:.1f}s")
        yield Cluster(
            master_port,
            master_webui_port,
            tuple(pids[1:]),
            tuple(port for port, _ in ports),
            master_pid,
        )
    finally:
        for pid in reversed(pids):
            stop(pid)


def worker_of(chain: list[int], executors: dict[int, int]) -> int | None:
    """The Spark worker above the executor in a task's process lineage (None: no executor)."""
    for i, pid in enumerate(chain):
        if pid in executors:
            assert chain[i + 1] == executors[pid], "an executor's parent is its worker"
            return executors[pid]
    return None


# In the full run: the default run's executor and worker kills (tests/cluster) need executors
# under the cluster shape's workers, and fail without them.
@pytest.mark.slow
def test_tasks_run_in_executors_under_both_workers_and_none_is_left(cluster: Cluster) -> None:
    state = spark.master_state(cluster.master_webui_port)
    assert state is not None and state.alive
    assert sorted(w.host_port for w in state.alive_workers()) == sorted(
        f"{spark.HOST}:{port}" for port in cluster.worker_ports
    )
    assert all(w.cores == 1 for w in state.alive_workers())
    for pid in (cluster.master_pid, *cluster.worker_pids):
        print(f"pid {pid}: {rss_mb(pid)} MiB resident")

    master = spark.master_url(cluster.master_port)
    argv = [sys.executable, "-m", __name__, master, *map(str, cluster.worker_pids)]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    print(json.dumps({k: report[k] for k in ("timings", "executor_rss_mb")}))

    # At least one executor JVM under each worker, each a child of its worker process.
    by_worker = {int(w): found for w, found in report["executors"].items()}
    assert all(by_worker[pid] for pid in cluster.worker_pids), by_worker
    executors = {e["pid"]: e["parent_pid"] for found in by_worker.values() for e in found}
    seen = [p for found in by_worker.values() for p in found]
    assert {e["worker"] for e in seen} == {f"{spark.HOST}:{p}" for p in cluster.worker_ports}

    # Every task ran in a Python worker under an executor under a Spark worker, never in the
    # driver (nor under it); both workers ran some.
    chains = report["tasks"] + [chain for _, chain in report["arrow"]]
    assert len(report["tasks"]) == PARTITIONS
    assert all(report["driver"] not in chain for chain in chains)
    workers = [worker_of(chain, executors) for chain in chains]
    assert None not in workers, chains
    assert set(workers[:PARTITIONS]) == set(cluster.worker_pids)
    assert sum(rows for rows, _ in report["arrow"]) == ARROW_ROWS

    # The session has stopped: the workers kill their executors; then stop the daemons by PID.
    ours = {f"{spark.HOST}:{port}" for port in cluster.worker_ports}

    def left() -> list[spark.ExecutorProcess]:
        return [e for e in spark.executor_processes() if e.worker in ours]

    wait_until("executors gone after the session stopped", lambda: not left(), timeout=60)
    for pid in (*cluster.worker_pids, cluster.master_pid):
        assert stop(pid) and not alive(pid)
    assert not left() and not any(alive(pid) for pid in executors)


if __name__ == "__main__":
    result = drive(sys.argv[1], [int(pid) for pid in sys.argv[2:]])
    print(json.dumps(result))
