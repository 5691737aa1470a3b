"""Why a connector task FAILED and the way out: the trace read, and a table of known causes.

A FAILED task stays failed until someone restarts it; meanwhile its replication slot is inactive,
holds WAL, and every later event of its database waits. `diagnose` turns Connect's status (and,
for a too-large record, the oversized events read from the slot) into a `Diagnosis` whose way out
names the commands to run. Pure: no Connect, Kafka or database access here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from cdc.connect import ConnectorStatus
from cdc.limits import CONNECTOR_CLIENT_CONFIG_OVERRIDE_POLICY, PRODUCER_MAX_REQUEST_SIZE
from outboxkit.kernel.wire import record_size, row_headers

_RECORD_TOO_LARGE = re.compile(r"RecordTooLargeException")
_TOO_LARGE = re.compile(r"The message is (\d+) bytes when serialized which is larger than (\d+)")


@dataclass(frozen=True)
class OversizedEvent:
    """An outbox event waiting in the slot whose Kafka record is over the producer's limit."""

    lsn: str
    event_id: str
    topic: str
    key: str
    event_type: str
    record_bytes: int  # as publish counts it: key, value, headers, Kafka's framing


@dataclass(frozen=True)
class Site:
    """What the way out names: the connector, its Connect cluster, slot and publication."""

    connector: str
    connect_url: str
    slot_name: str
    publication_name: str
    bootstrap_servers: str = "KAFKA"


@dataclass(frozen=True)
class Failure:
    """A FAILED task (task -1: the connector itself) and the exceptions of its trace."""

    task: int
    trace: str

    @property
    def chain(self) -> tuple[str, ...]:
        """'class: message' of the thrown exception and of each 'Caused by:', outermost first."""
        lines = self.trace.strip().splitlines() or ["(no trace)"]
        causes = [ln.strip()[len("Caused by: ") :] for ln in lines if ln.startswith("Caused by: ")]
        return (lines[0].strip(), *causes)

    @property
    def error(self) -> str:
        """The trace's first line: exception class and message."""
        return self.chain[0]

    @property
    def cause(self) -> str:
        """The root cause (the last 'Caused by:'), which names what really went wrong."""
        return self.chain[-1]


@dataclass(frozen=True)
class Diagnosis:
    """A failed task, its known cause (or none) and the way out, step by step."""

    connector: str
    failure: Failure
    reason: str
    way_out: tuple[str, ...]
    oversized: tuple[OversizedEvent, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, for `outboxkit dev stack status --json`."""
        return {
            "task": self.failure.task,
            "state": "FAILED",
            "error": self.failure.error,
            "cause": self.failure.cause,
            "reason": self.reason,
            "record": asdict(self.oversized[0]) if self.oversized else None,
            "oversized_waiting": len(self.oversized),
            "way_out": list(self.way_out),
            "trace": self.failure.trace,
        }


def describe(name: str, report: Mapping[str, Any]) -> list[str]:
    """Text lines of a diagnosis in its `as_dict` form (status and preflight print these)."""
    task = "connector" if report["task"] < 0 else f"task {report['task']}"
    lines = [f"connector {name}: {task} FAILED", f"  error:  {report['error']}"]
    if report["cause"] != report["error"]:
        lines.append(f"  cause:  {report['cause']}")
    lines.append(f"  reason: {report['reason']}")
    if record := report.get("record"):
        lines.append(
            f"  record: event {record['event_id']} to {record['topic']} (key {record['key']!r}, "
            f"type {record['event_type']}), ~{record['record_bytes']} bytes, LSN {record['lsn']}"
        )
    lines.append("  way out:")
    number = 0
    for step in report["way_out"]:  # an indented step details the one before it
        number += not step.startswith(" ")
        lines.append(f"       {step.strip()}" if step.startswith(" ") else f"    {number}. {step}")
    return lines


def record_bytes(values: Mapping[str, str | None]) -> int:
    """The Kafka record an outbox row becomes, in bytes, counted as publish counts it."""
    return record_size(values.get("aggregateid"), values.get("payload"), row_headers(values))


def suggested_max_bytes(record: int) -> int:
    """A limit that lets ``record`` through with its batch overhead: 1 KiB more, in 64 KiB."""
    return -(-(record + 1024) // 65536) * 65536


def is_record_too_large(status: ConnectorStatus) -> bool:
    """True when a FAILED task's trace is a RecordTooLargeException."""
    failed = (trace or "" for _, state, trace in status.tasks if state == "FAILED")
    return any(_RECORD_TOO_LARGE.search(trace) for trace in failed)


def _restart(site: Site) -> str:
    return (
        f"restart the failed task: outboxkit cdc restart --connector {site.connector} "
        f"(= POST {site.connect_url}/connectors/{site.connector}/restart"
        "?includeTasks=true&onlyFailed=true)"
    )


def _too_large(f: Failure, site: Site, oversized: Sequence[OversizedEvent]) -> list[str]:
    # The producer's message has the size; the broker's ("larger than the max message size
    # the server will accept") does not: then the events read from the slot must tell.
    measured = _TOO_LARGE.search(f.trace)
    size = max([e.record_bytes for e in oversized] + [int(measured[1]) if measured else 0])
    limit = suggested_max_bytes(size) if size else 2 * PRODUCER_MAX_REQUEST_SIZE
    topics = sorted({e.topic for e in oversized}) or ["TOPIC"]
    where = " ".join(f"--topic {t}" for t in topics)
    unknown = [] if oversized else ["TOPIC: the worker's log names it ('failed to send record to')"]
    return [
        *unknown,
        f"nothing is lost: the event and every event after it wait in slot {site.slot_name} "
        "(it holds WAL until the task runs again)",
        f"let it through: outboxkit cdc raise-limit --connector {site.connector} {where} "
        f"--max-bytes {limit}; that is:",
        *(
            f"  a) kafka-configs.sh --bootstrap-server {site.bootstrap_servers} --alter "
            f"--entity-type topics --entity-name {topic} --add-config max.message.bytes={limit}"
            for topic in topics
        ),
        f"  b) producer.override.max.request.size={limit} added to the connector's config (PUT "
        f"{site.connect_url}/connectors/{site.connector}/config; the worker's "
        f"connector.client.config.override.policy must allow it: "
        f"{CONNECTOR_CLIENT_CONFIG_OVERRIDE_POLICY}, Kafka's default)",
        f"  c) POST {site.connect_url}/connectors/{site.connector}/restart"
        "?includeTasks=true&onlyFailed=true",
        "the task resumes from its last committed offset: that event and every event after it "
        "are delivered, in order (exactly-once source: once each, but for the few events "
        "Debezium may re-emit on resuming; at-least-once: the events of the failed batch "
        "before it may repeat; the consumers' event-id window skips either)",
        f"once it is on the topic, lower the limits again: outboxkit cdc restore-limit "
        f"--connector {site.connector} {where}",
        "then make its writer use outbox.publish, which refuses such a record up front",
    ]


def _slot_in_use(f: Failure, site: Site, oversized: Sequence[OversizedEvent]) -> list[str]:
    return [
        f"find it: SELECT active_pid FROM pg_replication_slots WHERE slot_name = "
        f"'{site.slot_name}'",
        "stop that client (or SELECT pg_terminate_backend(active_pid)); then",
        _restart(site),
    ]


def _no_publication(f: Failure, site: Site, oversized: Sequence[OversizedEvent]) -> list[str]:
    return [
        f"CREATE PUBLICATION {site.publication_name} FOR TABLE public.outbox, "
        "public.outbox_heartbeat (or let the connector create it: "
        "publication.autocreate.mode=filtered); then",
        _restart(site),
    ]


def _unknown(f: Failure, site: Site, oversized: Sequence[OversizedEvent]) -> list[str]:
    return [
        _restart(site),
        "if it fails again, read the whole trace (outboxkit dev stack status --json: "
        f"failures.{site.connector}.trace) and the worker's log",
        f"meanwhile slot {site.slot_name} holds WAL: watch its lag (outboxkit cdc preflight)",
    ]


WayOut = Callable[[Failure, Site, Sequence[OversizedEvent]], list[str]]

# Known causes, by a pattern searched in the trace: the reason, and the way out.
KNOWN_CAUSES: tuple[tuple[re.Pattern[str], str, WayOut], ...] = (
    (
        _RECORD_TOO_LARGE,
        "an outbox event's Kafka record is larger than the producer's max.request.size or the "
        "topic's max.message.bytes",
        _too_large,
    ),
    (
        re.compile(r"replication slot \S+ is active for PID"),
        "another client is attached to the connector's replication slot",
        _slot_in_use,
    ),
    (
        re.compile(r"Publication autocreation is disabled|publication \S+ does not exist"),
        "the connector's publication is missing",
        _no_publication,
    ),
)


def diagnose(
    status: ConnectorStatus, site: Site, oversized: Sequence[OversizedEvent] = ()
) -> Diagnosis | None:
    """The first FAILED task's diagnosis, or None when nothing failed."""
    failed = [Failure(t, trace or "") for t, state, trace in status.tasks if state == "FAILED"]
    if not failed:
        return None
    failure = failed[0]
    for pattern, reason, way_out in KNOWN_CAUSES:
        if pattern.search(failure.trace):
            steps = way_out(failure, site, oversized)
            return Diagnosis(site.connector, failure, reason, tuple(steps), tuple(oversized))
    reason = f"no known cause: {failure.cause}"
    return Diagnosis(site.connector, failure, reason, tuple(_unknown(failure, site, oversized)))
