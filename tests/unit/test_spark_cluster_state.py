"""The standalone cluster's state read from the master's /json and from executors' /proc entries."""

from __future__ import annotations

import json

from outboxkit_workshop.devstack.spark import (
    EXECUTOR_CLASS,
    SparkWorker,
    master_url,
    parent_pid_of,
    parse_executor,
    parse_master_json,
)
from spark_consumers.session import loopback_cluster_options, on_loopback


def worker(port: int, state: str = "ALIVE", used: int = 0) -> dict[str, object]:
    """One worker as Spark 4.2's master writes it in /json/ (trimmed of unused fields)."""
    return {
        "id": f"worker-20261124154655-127.0.0.1-{port}",
        "host": "127.0.0.1",
        "port": port,
        "webuiaddress": f"http://127.0.0.1:{port + 1000}",
        "cores": 1,
        "coresused": used,
        "coresfree": 1 - used,
        "memory": 1024,
        "memoryused": 512 * used,
        "memoryfree": 1024 - 512 * used,
        "resources": {},
        "state": state,
        "lastheartbeat": 1795535220159,
    }


def master_json(*workers: dict[str, object], status: str = "ALIVE") -> str:
    app = {"id": "app-20261124154714-0000", "name": "x", "cores": 2, "state": "RUNNING"}
    return json.dumps(
        {
            "url": "spark://127.0.0.1:17077",
            "workers": list(workers),
            "aliveworkers": sum(w["state"] == "ALIVE" for w in workers),
            "cores": len(workers),
            "activeapps": [app],
            "completedapps": [],
            "status": status,
        }
    )


def test_master_alive_with_its_workers_and_applications():
    state = parse_master_json(master_json(worker(17101), worker(17102, used=1)))
    assert state.alive and state.url == master_url(17077)
    assert state.workers[1] == SparkWorker(
        id="worker-20261124154655-127.0.0.1-17102",
        host_port="127.0.0.1:17102",
        state="ALIVE",
        cores=1,
        cores_used=1,
        memory_mb=1024,
        memory_used_mb=512,
    )
    assert [a.id for a in state.applications] == ["app-20261124154714-0000"]
    assert state.applications[0].cores == 2


def test_a_master_that_is_not_the_leader_is_not_alive():
    assert not parse_master_json(master_json(status="STANDBY")).alive
    assert parse_master_json(master_json(status="STANDBY")).workers == ()


def test_a_lost_worker_stays_listed_as_dead_and_a_re_registered_one_wins():
    dead, again = worker(17101, state="DEAD"), worker(17101)
    state = parse_master_json(master_json(dead, worker(17102, state="DEAD")))
    assert state.alive_workers() == ()
    lost = state.worker_at("127.0.0.1:17101")
    assert lost is not None and lost.state == "DEAD"
    both = parse_master_json(master_json(dead, again))
    back = both.worker_at("127.0.0.1:17101")
    assert back is not None and back.state == "ALIVE"
    assert both.worker_at("127.0.0.1:9") is None


def test_executor_command_line():
    argv = ["/usr/bin/java", "-cp", "x/*", "-Xmx512M", EXECUTOR_CLASS, "--driver-url"]
    argv += ["spark://CoarseGrainedScheduler@127.0.0.1:46657", "--executor-id", "3"]
    argv += ["--hostname", "127.0.0.1", "--cores", "1", "--app-id", "app-1-0000"]
    argv += ["--worker-url", "spark://Worker@127.0.0.1:17101", "--resourceProfileId", "0", ""]
    executor = parse_executor(700, 600, argv)
    assert executor is not None
    assert (executor.pid, executor.parent_pid, executor.executor_id) == (700, 600, "3")
    assert (executor.app_id, executor.worker) == ("app-1-0000", "127.0.0.1:17101")
    other = ["/usr/bin/java", "org.apache.spark.deploy.worker.Worker", "spark://127.0.0.1:1"]
    assert parse_executor(701, 1, other) is None


def test_parent_pid_from_stat_even_when_the_command_name_holds_brackets():
    assert parent_pid_of("4242 (java) S 4100 4242 4100 0 -1 4194560 1 0") == 4100
    assert parent_pid_of("4243 (py) (x) y) R 17 4243 17 0 -1") == 17


def test_loopback_masters_and_the_settings_of_a_loopback_cluster():
    assert on_loopback("local[2]") and on_loopback("spark://127.0.0.1:7077")
    assert on_loopback("spark://localhost:7077")
    assert not on_loopback("spark://spark-master:7077") and not on_loopback("yarn")
    options = loopback_cluster_options(
        "spark://127.0.0.1:7077", python="/venv/bin/python", pythonpath="/repo", cores_max=2
    )
    assert options["spark.executor.cores"] == "1" and options["spark.cores.max"] == "2"
    assert options["spark.executorEnv.PYTHONPATH"] == "/repo"
    assert options["spark.executorEnv.PYSPARK_PYTHON"] == "/venv/bin/python"
    # A straggler gets a speculative copy, also in a micro-batch of one task.
    assert options["spark.speculation"] == "true"
    assert options["spark.speculation.task.duration.threshold"] == "5s"
    assert "spark.cores.max" not in loopback_cluster_options(
        "spark://127.0.0.1:7077", python="p", pythonpath="r"
    )
    # local[2] and a remote master get nothing from here: their settings stay as they were.
    assert loopback_cluster_options("local[2]", python="p", pythonpath="r") == {}
    assert loopback_cluster_options("spark://spark-master:7077", python="p", pythonpath="r") == {}


def test_each_loopback_spark_worker_has_an_address_of_its_own():
    # Spark starts a speculative copy only on another host than the attempt it doubles.
    from outboxkit_workshop.devstack.processes import LOOPBACK, Host
    from outboxkit_workshop.devstack.spark import loopback_host

    assert loopback_host("spark-worker-1") == Host("127.0.0.2")
    assert loopback_host("spark-worker-2") == Host("127.0.0.3")
    for other in ("spark-master", "kafka-1", "consumers", "spark-worker-x"):
        assert loopback_host(other) == LOOPBACK
