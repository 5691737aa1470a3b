"""How the framework reads a confluent-kafka failure (`outboxkit.kernel.kafka.failures`), on
real KafkaException and KafkaError objects."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from outboxkit.kernel.kafka.failures import kafka_error, reason, unanswered


@pytest.mark.parametrize(
    "code",
    [
        KafkaError._TRANSPORT,
        KafkaError._TIMED_OUT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._RESOLVE,
        KafkaError._MSG_TIMED_OUT,
    ],
)
def test_a_cluster_that_does_not_answer(code: int) -> None:
    exc = KafkaException(KafkaError(code, "127.0.0.1:9/bootstrap: Connect failed\nmore"))
    assert unanswered(exc)
    assert reason(exc) == "127.0.0.1:9/bootstrap: Connect failed"


def test_what_asking_again_would_not_change_is_not_unanswered() -> None:
    for code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.TOPIC_AUTHORIZATION_FAILED):
        assert not unanswered(KafkaException(KafkaError(code)))
    assert not unanswered(RuntimeError("no"))
    assert not unanswered(KafkaException())  # no KafkaError in it
    assert kafka_error(KafkaException("text only")) is None
    assert reason(KafkaException("text only")) == "text only"
    assert reason(TimeoutError()) == "TimeoutError"
    assert len(reason(RuntimeError("x" * 500))) == 200
