"""What a confluent-kafka failure says: the `KafkaError` a `KafkaException` carries, whether it
is the cluster not answering (down, restarting, not resolvable yet: asking again later can
succeed), and librdkafka's own words for it, one line. Every client of the framework reads its
failures through these."""

from __future__ import annotations

from typing import Any


def kafka_error(exc: BaseException) -> Any:
    """The `confluent_kafka.KafkaError` that ``exc`` (a KafkaException) carries, else None."""
    if type(exc).__name__ != "KafkaException" or not exc.args:
        return None
    from confluent_kafka import KafkaError

    error = exc.args[0]
    return error if isinstance(error, KafkaError) else None


def unanswered(exc: BaseException) -> bool:
    """True when ``exc`` says the cluster did not answer: no connection, all brokers down, a
    request timed out, a name not resolved (not: a topic unknown, an authorisation refused)."""
    error = kafka_error(exc)
    if error is None:
        return False
    from confluent_kafka import KafkaError

    return error.code() in {
        KafkaError._TRANSPORT,
        KafkaError._TIMED_OUT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._RESOLVE,
        KafkaError._MSG_TIMED_OUT,
    }


def reason(exc: BaseException, limit: int = 200) -> str:
    """librdkafka's own words for ``exc`` (its KafkaError's), else the exception's: one line of
    at most ``limit`` characters."""
    error = kafka_error(exc)
    said = str(error.str()) if error is not None else str(exc)
    return (said.strip().splitlines() or [type(exc).__name__])[0][:limit]
