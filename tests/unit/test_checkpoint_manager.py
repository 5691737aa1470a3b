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
    class_path_configured,
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
    for name in ("OUTBOXKIT_SPARK_FORKLESS_FS", "PYSPARK_SUBMIT_ARGS", "SPARK_CONF_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("SPARK_HOME", raising=False)
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


def test_the_class_named_is_the_one_the_local_fs_module_compiles() -> None:
    source = Path(__file__).resolve().parents[2] / "cdc" / "java" / "localfs" / "src" / "main"
    java = source / "java" / (FORKLESS_FS_CLASS.replace(".", "/") + ".java")
    assert f"public class {FORKLESS_FS_CLASS.rsplit('.', 1)[1]} " in java.read_text()


def test_a_class_path_configured_for_the_session_is_left_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ours would replace it, or it would replace ours and leave Hadoop without the class it is
    # told to load: Hadoop's own file system then, as before.
    assert not class_path_configured({})
    assert class_path_configured(
        {"PYSPARK_SUBMIT_ARGS": "--driver-class-path /a.jar pyspark-shell"}
    )
    submit = "--conf spark.executor.extraClassPath=/a.jar pyspark-shell"
    assert class_path_configured({"PYSPARK_SUBMIT_ARGS": submit})
    defaults = tmp_path / "spark-defaults.conf"
    defaults.write_text("spark.master local[2]\n# spark.driver.extraClassPath /commented.jar\n")
    assert not class_path_configured({"SPARK_CONF_DIR": str(tmp_path)})
    defaults.write_text("spark.driver.extraClassPath   /opt/mine.jar\n")
    assert class_path_configured({"SPARK_CONF_DIR": str(tmp_path)})
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "spark-defaults.conf").write_text("spark.executor.extraClassPath /b\n")
    assert class_path_configured({"SPARK_HOME": str(tmp_path)})
    ours = Path(f"/cache/spark/{FORKLESS_FS_JAR}1.jar")
    monkeypatch.delenv("OUTBOXKIT_SPARK_FORKLESS_FS", raising=False)
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    assert forkless_fs_jar([ours]) is None
