"""The sink's second look at the topics' ids, once a task has fetched its records: a topic
re-created between the driver's read (after Spark fixed the batch's offsets) and the fetch
fails the micro-batch before anything of it is applied."""

from __future__ import annotations

from typing import Any

import pytest

from inbox.position import TopicIdentity
from outboxkit.kernel.wire.record import KafkaRecord
from spark_consumers import sink
from spark_consumers.job import Job
from tests.integration.test_concurrent_attempts import arrow_slice

PLANNED = TopicIdentity("cluster", "topic-id-1")


class Reader:
    """What the executor's admin client answers, and how often it was asked."""

    def __init__(self, answer: dict[str, TopicIdentity]) -> None:
        self.answer = answer
        self.asked: list[list[str]] = []

    def read(self, topics: list[str]) -> dict[str, TopicIdentity]:
        self.asked.append(list(topics))
        return {t: self.answer[t] for t in topics if t in self.answer}


def never_applied(*_: Any, **__: Any) -> Any:
    raise AssertionError("applied although the topic changed")


@pytest.fixture
def job(monkeypatch: pytest.MonkeyPatch) -> Job:
    job = Job("j", ("orders",), "c", {}, "postgresql://nowhere/db", "kafka:9092")
    monkeypatch.setattr(sink, "_engine", never_applied)
    return job


def run(job: Job, reader: Reader, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sink, "_READERS", {f"kafka:9092 {[]}": reader})
    record = KafkaRecord("orders", 0, 7, b"k", b"{}", [("id", b"e")], None)
    list(sink.apply_batches([job], iter([arrow_slice([record])]), {"orders": PLANNED}))


@pytest.mark.parametrize(
    "now",
    [{"orders": TopicIdentity("cluster", "topic-id-2")}, {}],
    ids=["re-created", "deleted"],
)
def test_a_topic_changed_after_planning_fails_the_batch_before_applying(
    job: Job, monkeypatch: pytest.MonkeyPatch, now: dict[str, TopicIdentity]
) -> None:
    reader = Reader(now)
    with pytest.raises(sink.TopicChanged, match="topic-id-1 on cluster cluster when the"):
        run(job, reader, monkeypatch)
    assert reader.asked == [["orders"]]


def test_the_same_id_after_the_fetch_lets_the_batch_apply(
    job: Job, monkeypatch: pytest.MonkeyPatch
) -> None:
    reader = Reader({"orders": PLANNED})
    with pytest.raises(AssertionError, match="applied although"):  # it went on to apply
        run(job, reader, monkeypatch)
    assert reader.asked == [["orders"]]
