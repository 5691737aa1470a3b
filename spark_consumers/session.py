"""The Spark session for consumer jobs: loopback-bound, workers on this interpreter."""

from __future__ import annotations

import ipaddress
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost"})
# The repository root: executors of a loopback cluster import the project's modules from it.
REPOSITORY = Path(__file__).resolve().parents[1]


def on_loopback(master: str) -> bool:
    """True for ``local[...]`` and for a standalone master on this machine's loopback."""
    if master.startswith("local"):
        return True
    return master.startswith("spark://") and urlsplit(master).hostname in LOOPBACK_HOSTS


def on_stack_network(master: str) -> bool:
    """True for a standalone master on this driver's own /24 (``SPARK_LOCAL_IP``): the local
    stack's cluster on its partitionable network, each node on an address of its own."""
    local_ip = os.environ.get("SPARK_LOCAL_IP")
    host = urlsplit(master).hostname if master.startswith("spark://") else None
    if not local_ip or not host:
        return False
    try:
        return ipaddress.ip_address(host) in ipaddress.ip_network(f"{local_ip}/24", strict=False)
    except ValueError:  # a host name, not an address
        return False


# A straggling task (its executor frozen by a GC pause, a stopped VM, a noisy neighbour) gets a
# speculative copy on another host once it has run STRAGGLER_SECONDS and, when other tasks of
# its micro-batch are done, four times their median: the copy reads the same offsets, the
# inbox applies them once (the watermark row lock; `inbox.recorder`), and whichever attempt
# ends first ends the batch. Without it a frozen executor stalls its query for the whole
# freeze. ``task.duration.threshold`` covers a micro-batch of one task, where no median exists.
# Spark never runs the copy on the host of the attempt it doubles; on one host, there is none.
# No locality wait: a Kafka partition's task prefers the executor that read the partition last
# (its cached consumer), and Spark holds a task back for a busy preferred executor up to 3 s
# per locality level; a frozen executor stays busy, and every micro-batch of the freeze waited
# about 4 s for it (measured on the local stack's cluster). A free executor starts the task at
# once; the preferred one still gets it whenever it is free when the task is offered.
STRAGGLER_SECONDS = 5
SPECULATION: dict[str, str] = {
    "spark.speculation": "true",
    "spark.speculation.quantile": "0.5",
    "spark.speculation.multiplier": "4",
    "spark.speculation.minTaskRuntime": f"{STRAGGLER_SECONDS}s",
    "spark.speculation.task.duration.threshold": f"{STRAGGLER_SECONDS}s",
    "spark.locality.wait": "0s",
}


# Checkpoints on a local folder are written through Hadoop's local file system, which without
# Hadoop's native library (PySpark ships none) starts a `chmod` process for every file it
# creates and for its checksum file: four per micro-batch (the offset and commit logs), about
# 5 ms of CPU per file with its checksum. outboxkit's own (cdc/java/localfs, built beside
# Spark's Kafka connector) sets permissions through Java.
# Hadoop loads it by name when spark-submit starts, before `spark.jars` is read: it goes on the
# JVMs' own class path.
FORKLESS_FS_JAR = "outboxkit-localfs-"
FORKLESS_FS_CLASS = "io.outboxkit.hadoop.ForklessLocalFileSystem"


def forkless_fs_options(jar: str) -> dict[str, str]:
    """The settings that make ``jar`` (outboxkit's local file system) the ``file:`` file system
    of the driver and its executors."""
    return {
        "spark.driver.extraClassPath": jar,
        "spark.executor.extraClassPath": jar,
        "spark.hadoop.fs.file.impl": FORKLESS_FS_CLASS,
    }


def forkless_fs_jar(jars: Sequence[Path]) -> Path | None:
    """outboxkit's local file system among ``jars``; None (Hadoop's own) when
    OUTBOXKIT_SPARK_FORKLESS_FS is ``false`` (to measure what it costs) or a class path is
    configured for the session already (`class_path_configured`: it would be replaced, or
    replace this one and leave Hadoop unable to load the file system it is told to)."""
    if os.environ.get("OUTBOXKIT_SPARK_FORKLESS_FS", "true").lower() == "false":
        return None
    if class_path_configured():
        log.info("a Spark class path is configured: checkpoints through Hadoop's file system")
        return None
    return next((j for j in jars if j.name.startswith(FORKLESS_FS_JAR)), None)


CLASS_PATHS = ("spark.driver.extraClassPath", "spark.executor.extraClassPath")


def class_path_configured(environ: Mapping[str, str] | None = None) -> bool:
    """True when PYSPARK_SUBMIT_ARGS or spark-defaults.conf (in SPARK_CONF_DIR, else
    SPARK_HOME/conf) sets a driver or executor class path."""
    environ = os.environ if environ is None else environ
    submit = environ.get("PYSPARK_SUBMIT_ARGS", "")
    if "--driver-class-path" in submit or any(key in submit for key in CLASS_PATHS):
        return True
    folder = environ.get("SPARK_CONF_DIR") or (
        str(Path(environ["SPARK_HOME"]) / "conf") if environ.get("SPARK_HOME") else ""
    )
    defaults = Path(folder) / "spark-defaults.conf" if folder else None
    if defaults is None or not defaults.is_file():
        return False
    lines = defaults.read_text(errors="replace").splitlines()
    return any(line.split(maxsplit=1)[:1] in ([key] for key in CLASS_PATHS) for line in lines)


def loopback_cluster_options(
    master: str,
    *,
    python: str,
    pythonpath: str,
    cores_max: int | None = None,
    executor_memory: str = "512m",
    speculation: bool = True,
) -> dict[str, str]:
    """Settings for the local stack's standalone master (on loopback or its network): 1-core
    executors that run ``python`` with ``pythonpath``, speculative copies of straggling tasks
    (`SPECULATION`); none for any other master, whose settings come from spark-submit
    (settings made here would override them)."""
    if not (master.startswith("spark://") and (on_loopback(master) or on_stack_network(master))):
        return {}
    options = {
        **(SPECULATION if speculation else {"spark.speculation": "false"}),
        "spark.executor.cores": "1",
        "spark.executor.memory": executor_memory,
        "spark.executorEnv.PYSPARK_PYTHON": python,
        "spark.executorEnv.PYTHONPATH": pythonpath,
    }
    if cores_max is not None:  # unset: the application takes every free core of the cluster
        options["spark.cores.max"] = str(cores_max)
    return options


def build_session(
    app_name: str = "outboxkit",
    master: str | None = None,
    jars: Sequence[Path] = (),
    *,
    cores_max: int | None = None,
    executor_memory: str = "512m",
) -> Any:
    """A SparkSession (local[2] unless ``master`` or OUTBOXKIT_SPARK_MASTER says otherwise).

    Args:
        app_name: The Spark application's name.
        master: The Spark master URL; None: OUTBOXKIT_SPARK_MASTER, else spark-submit's
            ``--master`` when it started this driver, else ``local[2]``.
        jars: Spark's Kafka connector and its dependencies (the local stack's cache has them);
            on a cluster they come from spark-submit's ``--packages`` or the cluster's own
            classpath. outboxkit's local file system among them (`FORKLESS_FS_JAR`) becomes
            the ``file:`` file system (`forkless_fs_options`).
        cores_max: The most cores the application takes (``spark.cores.max``); a standalone
            master on loopback only.
        executor_memory: Each executor's memory (``spark.executor.memory``); a standalone
            master on loopback only.
    """
    # Workers must run this interpreter (the project's venv), or they cannot import our modules.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    master = master or os.environ.get("OUTBOXKIT_SPARK_MASTER")
    # Under spark-submit (its launcher started this driver) its --master holds: a master set
    # on the builder would override it.
    submitted = master is None and bool(os.environ.get("PYSPARK_GATEWAY_PORT"))
    master = master or ("" if submitted else "local[2]")
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    builder = (
        builder.config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")  # stage bars garble logs and progress
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.streaming.stopGracefullyOnShutdown", "true")
    )
    if jars:
        builder = builder.config("spark.jars", ",".join(str(j) for j in jars))
    # Under spark-submit the JVM runs already: its class path and settings are spark-submit's.
    forkless = None if submitted else forkless_fs_jar(jars)
    if forkless is not None:
        for key, value in forkless_fs_options(str(forkless)).items():
            builder = builder.config(key, value)
    if master and on_loopback(master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # the JVM binds loopback only
        builder = builder.config("spark.driver.bindAddress", "127.0.0.1").config(
            "spark.driver.host", "127.0.0.1"
        )
    elif master and on_stack_network(master):
        # The address executors reach this driver at on the stack's partitionable network:
        # bound and advertised, not the host name's.
        local_ip = os.environ["SPARK_LOCAL_IP"]
        builder = builder.config("spark.driver.bindAddress", local_ip).config(
            "spark.driver.host", local_ip
        )
    pythonpath = os.pathsep.join(p for p in (str(REPOSITORY), os.environ.get("PYTHONPATH")) if p)
    options = loopback_cluster_options(
        master,
        python=os.environ["PYSPARK_PYTHON"],
        pythonpath=pythonpath,
        cores_max=cores_max,
        executor_memory=executor_memory,
        # Off only to measure what it buys (`outboxkit dev chaos`'s executor freeze).
        speculation=os.environ.get("OUTBOXKIT_SPARK_SPECULATION", "true").lower() != "false",
    )
    for key, value in options.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    # py4j logs one INFO line per connection it closes, also from __del__ at interpreter exit,
    # when the handlers' streams may already be closed ("--- Logging error ---").
    logging.getLogger("py4j").setLevel(logging.WARNING)
    return session
