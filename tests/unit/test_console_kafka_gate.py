"""The console's gate on its reads of Kafka on request: one read of a cluster at a time, and
after one found Kafka silent, none for a while; each refusal at once, saying why."""

from __future__ import annotations

import threading

import pytest
from confluent_kafka import KafkaError, KafkaException

from outboxkit.console.kafka_gate import KafkaGate, KafkaUnanswered


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def down() -> None:
    raise KafkaException(KafkaError(KafkaError._TRANSPORT, "Failed to get metadata"))


def test_a_failed_read_refuses_the_next_ones_at_once_until_the_quiet_ends() -> None:
    clock, asked = Clock(), []
    gate = KafkaGate(quiet=15.0, clock=clock)

    def read() -> str:
        asked.append(clock.now)
        return "topics"

    with pytest.raises(KafkaUnanswered, match=r"Kafka at k:9092 did not answer \(.*metadata"):
        gate.read("k:9092", down)
    clock.now += 5
    with pytest.raises(KafkaUnanswered, match=r"did not answer 5 s ago .* asks again in 10 s"):
        gate.read("k:9092", read)
    assert asked == []  # not asked meanwhile
    assert gate.read("other:9092", read) == "topics"  # another cluster is
    clock.now += 10
    assert gate.read("k:9092", read) == "topics"  # asked again, and answered
    assert gate.read("k:9092", read) == "topics"
    assert len(asked) == 3


def test_one_read_of_a_cluster_at_a_time() -> None:
    gate, started, release = KafkaGate(), threading.Event(), threading.Event()

    def slow() -> str:
        started.set()
        release.wait(10)
        return "done"

    results: list[str] = []
    reader = threading.Thread(target=lambda: results.append(gate.read("k:9092", slow)))
    reader.start()
    assert started.wait(10)
    with pytest.raises(KafkaUnanswered, match="another page is reading Kafka at k:9092"):
        gate.read("k:9092", lambda: "second")
    release.set()
    reader.join(10)
    assert results == ["done"]
    assert gate.read("k:9092", lambda: "third") == "third"  # free again


def test_other_errors_pass_through_and_free_the_gate() -> None:
    gate = KafkaGate()

    def broken() -> None:
        raise ValueError("a bug")

    with pytest.raises(ValueError, match="a bug"):
        gate.read("k:9092", broken)
    assert gate.read("k:9092", lambda: 1) == 1
