"""The bridge from the JVM's streaming query events to the driver's listeners (pure logic: the
JVM's events are stand-ins that answer ``json()``; tests/e2e/test_consumer_metrics.py has the
real driver's listeners fed by it)."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from pyspark.sql.streaming.listener import StreamingQueryListener

from spark_consumers.listeners import QueryEvents
from spark_consumers.metrics.batches import BatchDurations
from spark_consumers.progress import ProgressLog

QUERY = "saga_payments+saga_shipping+saga_orders"
IDS = {
    "id": "28142449-d5af-4cee-acd0-159297b0f320",
    "runId": "2e98c399-e492-4192-be9d-a589dd02aa5e",
}


def source(rows: int) -> dict[str, Any]:
    return {
        "description": "KafkaV2[SubscribePattern[^(outbox\\.event\\.order)$]]",
        "startOffset": {"outbox.event.order": {"0": 560}},
        "endOffset": {"outbox.event.order": {"0": 560 + rows}},
        "latestOffset": {"outbox.event.order": {"0": 560 + rows}},
        "numInputRows": rows,
        "inputRowsPerSecond": 4.0,
        "processedRowsPerSecond": 9.5,
        "metrics": {"maxOffsetsBehindLatest": "0"},
    }


def progress_json(batch: int, rows: tuple[int, ...], millis: int) -> str:
    """A QueryProgressEvent's ``json()`` as Spark renders it: numInputRows per source only."""
    progress = {
        **IDS,
        "name": QUERY,
        "timestamp": "2026-11-26T06:32:28.452Z",
        "batchId": batch,
        "batchDuration": millis + 10,
        "durationMs": {"addBatch": millis - 100, "walCommit": 60, "triggerExecution": millis},
        "eventTime": {},
        "stateOperators": [],
        "sources": [source(n) for n in rows],
        "sink": {"description": "ForeachBatchSink", "numOutputRows": -1, "metrics": {}},
        "observedMetrics": {},
    }
    return json.dumps({"progress": progress})


class JEvent:
    """A JVM event: what the bridge may call on it, counted."""

    def __init__(self, text: str) -> None:
        self.text, self.calls = text, 0

    def json(self) -> str:
        self.calls += 1
        return self.text


class Recorded(StreamingQueryListener):
    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def onQueryStarted(self, event: Any) -> None:
        self.events.append(("started", event))

    def onQueryProgress(self, event: Any) -> None:
        self.events.append(("progress", event))

    def onQueryIdle(self, event: Any) -> None:
        self.events.append(("idle", event))

    def onQueryTerminated(self, event: Any) -> None:
        self.events.append(("terminated", event))


class Failing(Recorded):
    def onQueryProgress(self, event: Any) -> None:
        raise RuntimeError("listener bug")


def test_one_call_to_the_jvm_per_event_whatever_the_number_of_listeners() -> None:
    first, second = Recorded(), Recorded()
    events = QueryEvents([first, second])
    jevent = JEvent(progress_json(7, (3, 2), 450))
    events.onQueryProgress(jevent)
    assert jevent.calls == 1
    [(kind, event)] = first.events
    assert kind == "progress" and second.events == [("progress", event)]
    got = event.progress
    assert (got.name, got.batchId, got.numInputRows) == (QUERY, 7, 5)
    assert got.durationMs["triggerExecution"] == 450
    assert [s.numInputRows for s in got.sources] == [3, 2]


def test_the_driver_listeners_read_progress_rebuilt_from_json(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = CollectorRegistry()
    events = QueryEvents([ProgressLog(), BatchDurations(registry)])
    with caplog.at_level(logging.INFO, logger="outboxkit.consumers.progress"):
        events.onQueryProgress(JEvent(progress_json(8, (4,), 1500)))
        events.onQueryProgress(JEvent(progress_json(9, (0,), 20)))  # an empty trigger
    assert [r.getMessage() for r in caplog.records] == [
        f"{QUERY} batch 8: 4 rows, ms walCommit=60 addBatch=1400 triggerExecution=1500"
    ]
    count = registry.get_sample_value("outboxkit_consumer_batch_seconds_count", {"query": QUERY})
    total = registry.get_sample_value("outboxkit_consumer_batch_seconds_sum", {"query": QUERY})
    assert (count, total) == (1, 1.5)


def test_a_failing_listener_is_logged_and_the_next_one_still_gets_the_event(
    caplog: pytest.LogCaptureFixture,
) -> None:
    after = Recorded()
    events = QueryEvents([Failing(), after])
    with caplog.at_level(logging.ERROR, logger="outboxkit.consumers.listeners"):
        events.onQueryProgress(JEvent(progress_json(1, (1,), 300)))
    assert [kind for kind, _ in after.events] == ["progress"]
    [record] = caplog.records
    assert "Failing.onQueryProgress failed" in record.getMessage()
    assert record.exc_info is not None and "listener bug" in str(record.exc_info[1])


def test_started_idle_and_terminated_events_reach_every_listener() -> None:
    listener = Recorded()
    events = QueryEvents([listener])
    started = {**IDS, "name": QUERY, "timestamp": "2026-11-26T06:32:27.936Z", "jobTags": []}
    events.onQueryStarted(JEvent(json.dumps(started)))
    events.onQueryIdle(JEvent(json.dumps({**IDS, "timestamp": "2026-11-26T06:32:29.000Z"})))
    events.onQueryTerminated(
        JEvent(json.dumps({**IDS, "exception": "boom", "errorClassOnException": None}))
    )
    kinds = [kind for kind, _ in listener.events]
    assert kinds == ["started", "idle", "terminated"]
    started, idle, terminated = (event for _, event in listener.events)
    assert started.name == QUERY and str(started.id) == IDS["id"]
    assert str(idle.runId) == IDS["runId"]
    assert terminated.exception == "boom"
