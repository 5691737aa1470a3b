"""The console's reads of Kafka on request (an event's offsets on the topics, a rebase's plan)
through one gate per cluster: one read at a time, and none for a while after one found Kafka
silent. During an outage a page that needs Kafka answers at once with what happened, instead of
each request holding a worker thread for the client's timeouts (a few viewers would otherwise
take every thread, and the sign-in page with them)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

from outboxkit.kernel.kafka.failures import reason
from outboxkit.kernel.quiet import QUIET_SECONDS, Quiet

T = TypeVar("T")


class KafkaUnanswered(Exception):
    """Kafka was not asked, or did not answer: the message says which and when to retry."""


class KafkaGate:
    """One on-request read of each Kafka cluster at a time; after a read failed, none for
    ``quiet`` seconds (each refused at once, saying why)."""

    def __init__(
        self, quiet: float = QUIET_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.seconds = quiet  # each cluster's quiet spell after a failure
        self.clock = clock
        self._busy: set[str] = set()
        self._quiet: dict[str, Quiet] = {}  # per cluster
        self._lock = threading.Lock()

    def read(self, cluster: str, read: Callable[[], T]) -> T:
        """``read()`` (which asks Kafka at ``cluster``), unless another read of it runs or it
        failed less than ``quiet`` seconds ago: then KafkaUnanswered, at once. A read that
        raises librdkafka's KafkaException raises KafkaUnanswered with its reason."""
        with self._lock:
            quiet = self._quiet.setdefault(cluster, Quiet(self.seconds, self.clock))
            silence = quiet.silence()
            if silence is not None:
                raise KafkaUnanswered(
                    f"Kafka at {cluster} did not answer {silence.age:.0f} s ago "
                    f"({silence.why}); the console asks again in {silence.left:.0f} s"
                )
            if cluster in self._busy:
                raise KafkaUnanswered(
                    f"another page is reading Kafka at {cluster}; try again in a moment"
                )
            self._busy.add(cluster)
        try:
            found = read()
        except Exception as exc:
            if type(exc).__name__ != "KafkaException":
                raise
            why = reason(exc)
            quiet.failed(why)
            raise KafkaUnanswered(f"Kafka at {cluster} did not answer ({why})") from exc
        finally:
            with self._lock:
                self._busy.discard(cluster)
        quiet.answered()
        return found
