"""Test a service's routes, handlers and sagas in one process against a real Postgres, with no
Kafka, Connect or Spark: `Harness` captures every committed outbox event from the database,
writes the record the connector would write, and applies it through each consumer job's real
inbox (the same deduplication, parking, per-key hold and identity rules), with a clock that
releases scheduled messages and delayed retries, and faults to inject (replays, re-sends,
reordering, lost deliveries).

How to use it: docs/how-to/test-handlers.md."""

from outboxkit.testing.build import HarnessError
from outboxkit.testing.delivery import Delivery
from outboxkit.testing.harness import Harness
from outboxkit.testing.topics import Match, partition_of

__all__ = ["Delivery", "Harness", "HarnessError", "Match", "partition_of"]
