"""Which checkpoint manager and local file system the consumer queries use."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from outboxkit_workshop.devstack.artifacts import LOCALFS_JAR
from spark_consumers.runner import CHECKPOINT_FILE_MANAGER, LOCAL_CHECKPOINTS, use_local_checkpoints
from spark_consumers.session import (
    FORKLESS_FS_CLASS,
    FORKLESS_FS_JAR,
    forkless_fs_jar,
    forkless_fs_options,
)


class Conf:
    """A SparkSession's runtime conf: get with a default, set."""

    def __init__(self, **values: str) -> None:
        self.values = dict(values)

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def set(self, key: str, value: str) -> None:
        self.values[key] = value


class Session:
    def __init__(self, conf: Conf) -> None:
        self.conf = conf


def test_queries_write_checkpoints_through_the_filesystem_api_unless_the_session_names_one() -> (
    None
):
    plain = Session(Conf())
    use_local_checkpoints(plain)
    assert plain.conf.values == {CHECKPOINT_FILE_MANAGER: LOCAL_CHECKPOINTS}
    assert LOCAL_CHECKPOINTS.endswith(".FileSystemBasedCheckpointFileManager")
    own = Session(Conf(**{CHECKPOINT_FILE_MANAGER: "com.example.S3Manager"}))
    use_local_checkpoints(own)
    assert own.conf.values == {CHECKPOINT_FILE_MANAGER: "com.example.S3Manager"}


def test_outboxkit_s_local_file_system_is_used_when_its_jar_is_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kafka = Path("/cache/spark/spark-sql-kafka-0-10_2.13-4.2.0.jar")
    ours = Path(f"/cache/spark/{FORKLESS_FS_JAR}1.jar")
    monkeypatch.delenv("OUTBOXKIT_SPARK_FORKLESS_FS", raising=False)
    assert forkless_fs_jar([kafka, ours]) == ours
    assert LOCALFS_JAR == FORKLESS_FS_JAR  # the name the stack's install builds it under
    assert forkless_fs_jar([kafka]) is None  # a cluster whose class path lacks it: Hadoop's own
    monkeypatch.setenv("OUTBOXKIT_SPARK_FORKLESS_FS", "false")  # to measure what it saves
    assert forkless_fs_jar([kafka, ours]) is None
    # On the JVMs' own class path: Hadoop loads it when spark-submit starts.
    assert forkless_fs_options(str(ours)) == {
        "spark.driver.extraClassPath": str(ours),
        "spark.executor.extraClassPath": str(ours),
        "spark.hadoop.fs.file.impl": FORKLESS_FS_CLASS,
    }
