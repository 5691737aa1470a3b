"""When each record became visible to a read_committed reader: the "in Kafka" point of a hop."""

from __future__ import annotations

import threading
import time
from types import TracebackType

from confluent_kafka import OFFSET_END, Consumer, TopicPartition


class Arrivals:
    """Reads ``topic`` from its end on a thread while in the ``with`` block; ``seen`` maps each
    record's key to the wall-clock time it was first read."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.seen: dict[str, float] = {}
        self._topic = topic
        self._stop = threading.Event()
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "outboxkit-bench-arrivals",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "fetch.wait.max.ms": 10,
            }
        )
        self._thread = threading.Thread(target=self._run, name="arrivals", daemon=True)

    def __enter__(self) -> Arrivals:
        partitions = self._consumer.list_topics(self._topic, timeout=10).topics[self._topic]
        self._consumer.assign(
            [TopicPartition(self._topic, p, OFFSET_END) for p in partitions.partitions]
        )
        self._thread.start()
        return self

    def _run(self) -> None:  # all consumer calls on this one thread
        try:
            while not self._stop.is_set():
                message = self._consumer.poll(0.05)
                key = None if message is None or message.error() else message.key()
                if key:
                    self.seen.setdefault(key.decode(errors="replace"), time.time())
        finally:
            self._consumer.close()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
