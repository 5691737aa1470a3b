"""The Spark session for consumer jobs: loopback-bound, workers on this interpreter."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def build_session(
    app_name: str = "outboxkit", master: str | None = None, jars: Sequence[Path] = ()
) -> Any:
    """A SparkSession (local[2] unless ``master`` or OUTBOXKIT_SPARK_MASTER says otherwise).

    ``jars``: Spark's Kafka connector and its dependencies (the local stack's cache has them);
    on a cluster they come from spark-submit's ``--packages`` or the cluster's own classpath."""
    # Workers must run this interpreter (the project's venv), or they cannot import our modules.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    master = master or os.environ.get("OUTBOXKIT_SPARK_MASTER", "local[2]")
    builder = (
        SparkSession.builder.appName(app_name)
        .master(master)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")  # stage bars garble logs and progress
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.streaming.stopGracefullyOnShutdown", "true")
    )
    if jars:
        builder = builder.config("spark.jars", ",".join(str(j) for j in jars))
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # the JVM binds loopback only
        builder = builder.config("spark.driver.bindAddress", "127.0.0.1").config(
            "spark.driver.host", "127.0.0.1"
        )
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session
