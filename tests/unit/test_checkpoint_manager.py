"""Which checkpoint manager the consumer queries use."""

from __future__ import annotations

from typing import Any

from spark_consumers.runner import CHECKPOINT_FILE_MANAGER, LOCAL_CHECKPOINTS, use_local_checkpoints


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
