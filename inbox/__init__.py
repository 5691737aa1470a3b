"""The inbox: apply Kafka records exactly once on the consumer's database, one transaction per
partition slice, deduplicated by (partition, max offset) and a window of recent event ids sized
to the source's re-sends; a record that cannot be applied is parked with its reason, never
skipped."""

import outboxkit.kernel  # noqa: F401  (first: it refuses packages shadowing the framework's)
from inbox.apply import DEFAULT_MAX_ATTEMPTS, DEFAULT_WINDOW, EXACTLY_ONCE_WINDOW, Inbox
from inbox.handlers import BatchHandler, Handler, Handlers, as_batch
from inbox.operations import status
from inbox.redrives import RedriveResult, redrive, retry_due
from inbox.retries import RetryLater, RetryPolicy
from inbox.slice import BatchResult, HandlerOutcome
from inbox.tables import metadata
from inbox.typed import typed_batch, typed_handler

__all__ = [
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_WINDOW",
    "EXACTLY_ONCE_WINDOW",
    "BatchHandler",
    "BatchResult",
    "Handler",
    "HandlerOutcome",
    "Handlers",
    "Inbox",
    "RedriveResult",
    "RetryLater",
    "RetryPolicy",
    "as_batch",
    "metadata",
    "redrive",
    "retry_due",
    "status",
    "typed_batch",
    "typed_handler",
]
