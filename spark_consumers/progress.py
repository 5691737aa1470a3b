"""One log line per micro-batch with Spark's own phase durations: where a batch's time goes."""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql.streaming.listener import StreamingQueryListener

log = logging.getLogger("outboxkit.consumers.progress")

# Spark's durationMs keys, in the order a batch runs them.
PHASES = (
    "latestOffset",
    "queryPlanning",
    "walCommit",
    "addBatch",
    "commitOffsets",
    "triggerExecution",
)


def progress_line(progress: Any) -> str:
    """``name batch N: R rows, phase=ms ...`` from a StreamingQueryProgress."""
    durations = dict(progress.durationMs or {})
    phases = " ".join(f"{p}={durations[p]}" for p in PHASES if p in durations)
    return f"{progress.name} batch {progress.batchId}: {progress.numInputRows} rows, ms {phases}"


class ProgressLog(StreamingQueryListener):
    """Logs every batch that read rows (idle triggers are not logged)."""

    def onQueryStarted(self, event: Any) -> None:
        log.info("query %s started (id %s)", event.name, event.id)

    def onQueryProgress(self, event: Any) -> None:
        if event.progress.numInputRows:
            log.info("%s", progress_line(event.progress))

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        if event.exception:
            log.error("query %s terminated: %s", event.id, event.exception)
