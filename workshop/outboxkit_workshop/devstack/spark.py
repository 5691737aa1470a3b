"""A Spark standalone cluster on loopback, from PySpark's own distribution: a master, workers,
and the executor JVMs the workers start (read from the master's /json and from /proc)."""

from __future__ import annotations

import functools
import importlib.util
import itertools
import json
import os
import sys
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from outboxkit_workshop.devstack.processes import (
    LOOPBACK,
    Host,
    StackError,
    alive,
    free_port,
    log4j2_properties,
    port_open,
    released,
    start,
    stop,
    wait_until,
)
from outboxkit_workshop.devstack.state import EMBEDDED, Component, Node

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
HOST = LOOPBACK.address
# Deploy events (worker registered or lost, executor launched or killed) stay visible.
LOG4J2 = log4j2_properties("WARN", {"org.apache.spark.deploy": "INFO"})
# The repository root: executors' Python workers import the project's modules from it.
REPOSITORY = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class SparkWorker:
    """A worker as the master sees it."""

    id: str
    host_port: str
    state: str
    cores: int
    cores_used: int
    memory_mb: int
    memory_used_mb: int


@dataclass(frozen=True)
class SparkApplication:
    """An application (a driver) registered with the master."""

    id: str
    name: str
    cores: int
    state: str


@dataclass(frozen=True)
class SparkMaster:
    """The master's answer on its web UI's /json: its status, workers and applications."""

    url: str
    status: str
    workers: tuple[SparkWorker, ...]
    applications: tuple[SparkApplication, ...]

    @property
    def alive(self) -> bool:
        """True when this master is the elected leader and accepts workers and drivers."""
        return self.status == "ALIVE"

    def alive_workers(self) -> tuple[SparkWorker, ...]:
        """The workers in state ALIVE (a lost worker stays listed as DEAD)."""
        return tuple(w for w in self.workers if w.state == "ALIVE")

    def worker_at(self, host_port: str) -> SparkWorker | None:
        """The worker listening on ``host_port`` (its ALIVE registration if it re-registered)."""
        matches = [w for w in self.workers if w.host_port == host_port]
        return max(matches, key=lambda w: w.state == "ALIVE") if matches else None


@dataclass(frozen=True)
class ExecutorProcess:
    """An executor JVM (CoarseGrainedExecutorBackend) found in /proc."""

    pid: int
    parent_pid: int
    app_id: str
    executor_id: str
    worker: str  # host:port of the worker that launched it


def loopback_host(node: str) -> Host:
    """Where ``node`` runs on loopback: Spark worker N on 127.0.0.(N+1), as if on a machine of
    its own, every other node on 127.0.0.1. Spark runs a speculative copy of a straggling task
    only on another host than the attempt it doubles (`spark_consumers.session.SPECULATION`):
    with every worker on one address, a frozen executor's task would never get one."""
    prefix = "spark-worker-"
    if node.startswith(prefix) and node.removeprefix(prefix).isdigit():
        return Host(f"127.0.0.{int(node.removeprefix(prefix)) + 1}")
    return LOOPBACK


def master_url(port: int, address: str = HOST) -> str:
    """The URL drivers and workers use for the master on ``address``:``port``."""
    return f"spark://{address}:{port}"


def parse_master_json(text: str) -> SparkMaster:
    """The master's state from the body of its web UI's ``/json/`` endpoint."""
    doc = json.loads(text)
    workers = tuple(
        SparkWorker(
            id=w["id"],
            host_port=f"{w['host']}:{w['port']}",
            state=w["state"],
            cores=int(w["cores"]),
            cores_used=int(w.get("coresused", 0)),
            memory_mb=int(w.get("memory", 0)),
            memory_used_mb=int(w.get("memoryused", 0)),
        )
        for w in doc.get("workers", [])
    )
    apps = tuple(
        SparkApplication(id=a["id"], name=a["name"], cores=int(a["cores"]), state=a["state"])
        for a in doc.get("activeapps", [])
    )
    return SparkMaster(url=doc["url"], status=doc["status"], workers=workers, applications=apps)


def parse_executor(pid: int, parent: int, argv: Sequence[str]) -> ExecutorProcess | None:
    """The executor that the command line ``argv`` of process ``pid`` runs, or None when it is
    not an executor's."""
    if EXECUTOR_CLASS not in argv:
        return None
    options = dict(itertools.pairwise(argv))  # each option followed by its value
    worker_url = options.get("--worker-url", "")  # spark://Worker@127.0.0.1:PORT
    return ExecutorProcess(
        pid=pid,
        parent_pid=parent,
        app_id=options.get("--app-id", ""),
        executor_id=options.get("--executor-id", ""),
        worker=worker_url.rpartition("@")[2],
    )


def parent_pid_of(stat: str) -> int:
    """The parent PID in the text of /proc/<pid>/stat (the command name may hold ') ')."""
    return int(stat.rpartition(") ")[2].split()[1])


def parent_pid(pid: int) -> int:
    """The parent of process ``pid`` (0 when it has gone)."""
    try:
        return parent_pid_of(Path(f"/proc/{pid}/stat").read_text())
    except (OSError, ValueError, IndexError):
        return 0


def executor_processes() -> list[ExecutorProcess]:
    """Every executor JVM on this machine, whichever worker (or none, once orphaned) runs it."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:  # the process ended while we read it
            continue
        pid = int(entry.name)
        executor = parse_executor(pid, parent_pid(pid), argv) if EXECUTOR_CLASS in argv else None
        if executor is not None:
            found.append(executor)
    return found


def executors_of(worker_pid: int) -> list[ExecutorProcess]:
    """The executor JVMs the worker process ``worker_pid`` runs (its children)."""
    return [e for e in executor_processes() if e.parent_pid == worker_pid]


def master_state(webui_port: int, timeout: float = 2.0, address: str = HOST) -> SparkMaster | None:
    """The master's state from its web UI, or None while it does not answer."""
    url = f"http://{address}:{webui_port}/json/"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            body: bytes = answer.read()
    except OSError:
        return None
    try:
        return parse_master_json(body.decode())
    except ValueError:  # starting: the UI answers before its JSON handler is mounted
        return None


def spark_home() -> Path:
    """PySpark's package directory: its ``bin/spark-class`` and ``jars/`` are a Spark home."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise StackError("pyspark is not installed: install outboxkit[spark] into this venv")
    return Path(next(iter(spec.submodule_search_locations)))


def daemon_env(
    workdir: Path, java_opts_var: str, java_opts: str, address: str = HOST
) -> dict[str, str]:
    """The environment of a master or worker JVM, and of the executors a worker starts."""
    conf = workdir / "conf"  # on the classpath: our log4j2, no stray spark-env.sh or defaults
    conf.mkdir(parents=True, exist_ok=True)
    (conf / "log4j2.properties").write_text(LOG4J2)
    (workdir / "tmp").mkdir(exist_ok=True)
    pythonpath = os.pathsep.join(p for p in (str(REPOSITORY), os.environ.get("PYTHONPATH")) if p)
    return {
        "SPARK_HOME": str(spark_home()),
        "SPARK_CONF_DIR": str(conf),
        "SPARK_LOCAL_IP": address,
        "SPARK_LOCAL_DIRS": str(workdir / "tmp"),
        "SPARK_DAEMON_MEMORY": "256m",
        "SPARK_DAEMON_JAVA_OPTS": "-XX:+UseSerialGC",
        # Fail on a taken port instead of silently moving to the next one.
        java_opts_var: f"-Dspark.port.maxRetries=0 {java_opts}".strip(),
        "PYSPARK_PYTHON": sys.executable,
        "PYTHONPATH": pythonpath,
    }


def _spark_class(main_class: str, *args: str) -> list[str]:
    # spark-class execs the JVM in the foreground: the PID we hold is the JVM's.
    return [str(spark_home() / "bin" / "spark-class"), main_class, *args]


def _start(
    name: str,
    argv: list[str],
    workdir: Path,
    log: Path,
    env: dict[str, str],
    ports: Sequence[int],
    ready: Callable[[], bool] | None,
    host: Host = LOOPBACK,
) -> int:
    # A process already on a port would answer the readiness check in the new one's place.
    for port in ports:
        if port_open(port, host.address):
            raise StackError(
                f"{name}: port {port} on {host.address} is in use; stop what holds it or choose "
                "another"
            )
    pid = start(name, argv, log=log, env=env, cwd=workdir, host=host)
    if ready is None:
        return pid
    try:
        wait_until(name, ready, timeout=120, pid=pid, log=log)
    except StackError:
        stop(pid)  # not yet in any state file: nobody else could stop it
        raise
    return pid


def start_master(
    workdir: Path,
    port: int,
    webui_port: int,
    log: Path,
    env: Mapping[str, str] | None = None,
    host: Host = LOOPBACK,
) -> int:
    """Start a master on ``host`` (loopback by default); return its PID once its /json says
    ALIVE (``env`` adds or replaces variables, e.g. SPARK_MASTER_OPTS)."""
    workdir.mkdir(parents=True, exist_ok=True)
    # The REST submission server would take the fixed port 6066: drivers here need none.
    full_env = {
        **daemon_env(
            workdir, "SPARK_MASTER_OPTS", "-Dspark.master.rest.enabled=false", host.address
        ),
        **(env or {}),
    }
    argv = _spark_class(
        MASTER_CLASS, "--host", host.address, "--port", str(port), "--webui-port", str(webui_port)
    )

    def ready() -> bool:
        state = master_state(webui_port, address=host.address)
        return state is not None and state.alive

    return _start("spark master", argv, workdir, log, full_env, (port, webui_port), ready, host)


def worker_ready(
    master_webui_port: int, port: int, master_address: str = HOST, address: str = HOST
) -> bool:
    """True when the master (its web UI on ``master_address``) lists the worker on
    ``address``:``port`` as ALIVE."""
    state = master_state(master_webui_port, address=master_address)
    worker = state.worker_at(f"{address}:{port}") if state else None
    return worker is not None and worker.state == "ALIVE"


def start_worker(
    master: str,
    workdir: Path,
    port: int,
    webui_port: int,
    log: Path,
    env: Mapping[str, str] | None = None,
    *,
    master_webui_port: int,
    cores: int = 1,
    memory: str = "1g",
    wait: bool = True,
    host: Host = LOOPBACK,
) -> int:
    """Start a worker of ``master`` (a spark:// URL) offering ``cores`` and ``memory`` to
    executors; return its PID once the master lists it ALIVE (at once if not ``wait``: then
    poll `worker_ready`, e.g. to start several workers side by side)."""
    workdir.mkdir(parents=True, exist_ok=True)
    full_env = {**daemon_env(workdir, "SPARK_WORKER_OPTS", "", host.address), **(env or {})}
    argv = _spark_class(
        WORKER_CLASS,
        master,
        "--cores",
        str(cores),
        "--memory",
        memory,
        "--work-dir",
        str(workdir / "work"),
        "--host",
        host.address,
        "--port",
        str(port),
        "--webui-port",
        str(webui_port),
    )
    master_address = master.removeprefix("spark://").rpartition(":")[0]
    ready = (
        (lambda: worker_ready(master_webui_port, port, master_address, host.address))
        if wait
        else None
    )
    name = f"spark worker :{port}"
    return _start(name, argv, workdir, log, full_env, (port, webui_port), ready, host)


# A worker that stops heartbeating is declared lost after this many seconds (Spark's default is
# 60): its executors' tasks are then scheduled on the other workers. Master and workers must
# agree: a worker heartbeats every quarter of its own setting, so a worker left at 60 s
# (a heartbeat every 15 s) would be declared lost by a master at 15 s again and again.
WORKER_TIMEOUT_S = 15
TIMEOUT_OPTION = f"-Dspark.worker.timeout={WORKER_TIMEOUT_S}"


def ensure(
    root: Path,
    logs: Path,
    size: int,
    previous: Component | None,
    hosts: Callable[[str], Host] = lambda name: LOOPBACK,
) -> Component:
    """A master and ``size`` one-core workers, each running: the nodes of ``previous`` that
    still run are kept, the others started again on their ports (a driver holding the master's
    URL keeps working). ``hosts``: where each node runs, by name. The endpoint is the master's
    spark:// URL."""
    old = {n.name: n for n in previous.nodes} if previous and previous.mode == EMBEDDED else {}
    names = ["spark-master", *(f"spark-worker-{i}" for i in range(1, size + 1))]
    nodes = []
    for name in names:
        kept = old.get(name)
        port = kept.port if kept and kept.port else free_port()
        webui = kept.extra_port if kept and kept.extra_port else free_port()
        role = "spark master" if name == "spark-master" else "spark worker (1 core)"
        nodes.append(Node(name, role, kept.pid if kept else None, port, "", webui))
    master, workers = nodes[0], nodes[1:]
    assert master.port and master.extra_port
    master_host = hosts(master.name)
    master.endpoint = master_url(master.port, master_host.address)
    if not alive(master.pid):
        for port in (master.port, master.extra_port):
            wait_until(f"port {port} free", released(port, master_host.address), timeout=30)
        master.pid = start_master(
            root / "spark" / "master",
            master.port,
            master.extra_port,
            logs / "spark-master.log",
            {
                "SPARK_MASTER_OPTS": "-Dspark.port.maxRetries=0 "
                f"-Dspark.master.rest.enabled=false {TIMEOUT_OPTION}"
            },
            master_host,
        )
    started = []
    for index, worker in enumerate(workers, start=1):
        assert worker.port and worker.extra_port
        worker_host = hosts(worker.name)
        worker.endpoint = f"{worker_host.address}:{worker.port}"
        if alive(worker.pid):
            continue
        for port in (worker.port, worker.extra_port):
            wait_until(f"port {port} free", released(port, worker_host.address), timeout=30)
        worker.pid = start_worker(
            master.endpoint,
            root / "spark" / f"worker-{index}",
            worker.port,
            worker.extra_port,
            logs / f"spark-worker-{index}.log",
            {"SPARK_WORKER_OPTS": f"-Dspark.port.maxRetries=0 {TIMEOUT_OPTION}"},
            master_webui_port=master.extra_port,
            wait=False,
            host=worker_host,
        )
        started.append(worker)
    for worker in started:
        assert worker.port
        wait_until(
            worker.name,
            functools.partial(
                worker_ready,
                master.extra_port,
                worker.port,
                master_host.address,
                hosts(worker.name).address,
            ),
            timeout=120,
            pid=worker.pid,
        )
    return Component(EMBEDDED, master.endpoint, nodes)
