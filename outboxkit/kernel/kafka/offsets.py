"""Kafka's offsets of topic partitions, for lag metrics: one lazily made consumer, one caller at
a time, and None (logged) instead of an error when the broker does not answer in time."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from outboxkit.kernel.kafka.security import PLAINTEXT, KafkaSecurity, client_config
from outboxkit.kernel.quiet import Quiet

log = logging.getLogger(__name__)


class PartitionOffsets:
    """Reads a partition's first and end offsets and a topic's partitions (nothing connects
    before the first read)."""

    def __init__(
        self,
        bootstrap: str,
        kafka_security: KafkaSecurity = PLAINTEXT,
        options: Mapping[str, str] | None = None,
        timeout: float = 2.0,
    ) -> None:
        self.config = {
            "group.id": "outboxkit-metrics",
            **client_config(bootstrap, kafka_security, options),
        }
        self.timeout = timeout
        self._consumer: Any = None
        # Scrapes run on the HTTP server's threads; librdkafka calls on one handle from several
        # threads at once can hang (a close racing a call), so they take turns.
        self._lock = threading.Lock()
        # After Kafka failed to answer, scrapes skip it for a while instead of each waiting the
        # timeout once per partition (a scrape must end before the next one starts).
        self.quiet = Quiet()

    def _client(self) -> Any:
        if self._consumer is None:
            from confluent_kafka import Consumer

            self._consumer = Consumer(self.config)
        return self._consumer

    def bounds(self, topic: str, partition: int) -> tuple[int, int] | None:
        """(first, end) offsets of ``topic[partition]``; None when Kafka does not answer."""
        from confluent_kafka import TopicPartition

        with self._lock:
            if self.quiet.silence() is not None:
                return None
            try:
                low, high = self._client().get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=self.timeout, cached=False
                )
            except Exception as exc:  # a scrape must not fail because Kafka is slow
                log.warning("no offsets for %s[%d]: %s", topic, partition, exc)
                self._quiet_if_silent(exc)
                return None
            self.quiet.answered()
        return int(low), int(high)

    def partitions(self, topic: str) -> list[int]:
        """The partitions ``topic`` has now (none when it does not exist or Kafka is silent)."""
        with self._lock:
            if self.quiet.silence() is not None:
                return []
            try:
                found = self._client().list_topics(topic, timeout=self.timeout).topics.get(topic)
            except Exception as exc:
                log.warning("no partitions of %s: %s", topic, exc)
                self._quiet_if_silent(exc)
                return []
        if found is None or found.error is not None:
            return []
        return sorted(found.partitions)

    def close(self) -> None:
        """Close the consumer, if one was made."""
        with self._lock:
            if self._consumer is not None:
                self._consumer.close()
                self._consumer = None

    def _quiet_if_silent(self, exc: Exception) -> None:
        """Kafka is down or did not answer in time (not: the topic is unknown): stop asking for a
        while."""
        from outboxkit.kernel.kafka.failures import reason, unanswered

        if unanswered(exc):
            self.quiet.failed(reason(exc))

    @property
    def failure(self) -> str | None:
        """Why Kafka last failed to answer, until it answers again (None: it answered)."""
        return self.quiet.why
