"""A FAILED connector task read from Connect's status: its cause, the way out, the slot's events."""

from __future__ import annotations

import struct

import pytest

from cdc.connect import parse_status
from cdc.health import (
    OversizedEvent,
    Site,
    describe,
    diagnose,
    record_bytes,
    suggested_max_bytes,
)
from cdc.pgoutput import inserted_rows
from cdc.preflight import connector_check
from outboxkit.kernel.wire import HEADER_OVERHEAD_BYTES, RECORD_OVERHEAD_BYTES

# Connect 4.3's trace for a too-large record under exactly-once source (trimmed).
TOO_LARGE = (
    "org.apache.kafka.connect.errors.ConnectException: Unrecoverable exception trying to send\n"
    "\tat org.apache.kafka.connect.runtime.ExactlyOnceWorkerSourceTask.producerSendFailed("
    "ExactlyOnceWorkerSourceTask.java:220)\n"
    "Caused by: org.apache.kafka.common.KafkaException: Cannot execute transactional method "
    "because we are in an error state\n"
    "\tat org.apache.kafka.clients.producer.KafkaProducer.doSend(KafkaProducer.java:1038)\n"
    "\t... 10 more\n"
    "Caused by: org.apache.kafka.common.errors.RecordTooLargeException: The message is 1200220 "
    "bytes when serialized which is larger than 1048576, which is the value of the "
    "max.request.size configuration.\n"
)
SITE = Site("orders-outbox", "http://connect:8083", "orders_slot", "orders_pub", "kafka:9092")


def status(trace: str | None, state: str = "FAILED") -> dict[str, object]:
    task = {"id": 0, "state": state, "worker_id": "w", **({"trace": trace} if trace else {})}
    return {"name": "orders-outbox", "connector": {"state": "RUNNING"}, "tasks": [task]}


def test_a_running_connector_has_no_diagnosis():
    assert diagnose(parse_status(status(None, "RUNNING")), SITE) is None


def test_record_too_large_names_the_root_cause_the_record_and_the_way_out():
    big = OversizedEvent("0/19B2238", "e-1", "outbox.event.order", "o-1", "OrderPlaced", 1_200_120)
    found = diagnose(parse_status(status(TOO_LARGE)), SITE, [big])
    assert found is not None
    assert found.failure.error.endswith("ConnectException: Unrecoverable exception trying to send")
    assert "RecordTooLargeException: The message is 1200220 bytes" in found.failure.cause
    steps = "\n".join(found.way_out)
    limit = suggested_max_bytes(1_200_220)
    assert limit == 1_245_184
    assert (
        f"outboxkit cdc raise-limit --connector orders-outbox --topic outbox.event.order "
        f"--max-bytes {limit}" in steps
    )
    assert f"--entity-name outbox.event.order --add-config max.message.bytes={limit}" in steps
    assert f"producer.override.max.request.size={limit}" in steps
    assert (
        "POST http://connect:8083/connectors/orders-outbox/restart"
        "?includeTasks=true&onlyFailed=true" in steps
    )
    assert "cdc restore-limit --connector orders-outbox --topic outbox.event.order" in steps
    report = found.as_dict()
    assert report["record"]["event_id"] == "e-1" and report["trace"] == TOO_LARGE
    text = "\n".join(describe("orders-outbox", report))
    assert "task 0 FAILED" in text and "record: event e-1 to outbox.event.order" in text
    assert "    2. let it through" in text and "       a) kafka-configs.sh" in text


def test_record_too_large_at_the_broker_without_the_event_still_gives_the_way_out():
    trace = (
        "org.apache.kafka.connect.errors.ConnectException: Failed to flush offsets\n"
        "Caused by: org.apache.kafka.common.errors.RecordTooLargeException: The request included "
        "a message larger than the max message size the server will accept.\n"
    )
    found = diagnose(parse_status(status(trace)), SITE)
    assert found is not None and found.oversized == ()
    assert "failed to send record to" in found.way_out[0]  # where to find the topic
    assert any("--max-bytes 2097152" in step for step in found.way_out)


def test_unknown_cause_falls_back_to_restart_and_the_trace():
    trace = "java.lang.IllegalStateException: boom\n\tat x.Y(Y.java:1)\n"
    found = diagnose(parse_status(status(trace)), SITE)
    assert found is not None
    assert found.reason == "no known cause: java.lang.IllegalStateException: boom"
    assert "onlyFailed=true" in found.way_out[0] and "trace" in found.way_out[1]


def test_slot_in_use_and_missing_publication_are_known():
    in_use = 'org.postgresql.util.PSQLException: ERROR: replication slot "orders_slot" is '
    in_use += "active for PID 4242\n"
    missing = "io.debezium.DebeziumException: Publication autocreation is disabled, please "
    missing += "create one and restart the connector.\n"
    slot = diagnose(parse_status(status(in_use)), SITE)
    publication = diagnose(parse_status(status(missing)), SITE)
    assert slot is not None and "pg_replication_slots" in slot.way_out[0]
    assert publication is not None and "CREATE PUBLICATION orders_pub" in publication.way_out[0]


def test_a_failed_connector_itself_is_diagnosed_as_task_minus_one():
    body = {"name": "c", "connector": {"state": "FAILED", "trace": "x.Boom: no\n"}, "tasks": []}
    found = diagnose(parse_status(body), SITE)
    assert found is not None and found.failure.task == -1
    assert describe("c", found.as_dict())[0] == "connector c: connector FAILED"


def test_preflight_connector_check():
    failed = parse_status(status(TOO_LARGE))
    check = connector_check("orders-outbox", failed, diagnose(failed, SITE))
    assert not check.ok and check.detail.startswith("task 0 FAILED\n")
    assert "way out:" in check.detail
    running = parse_status(status(None, "RUNNING"))
    assert connector_check("orders-outbox", running, None).detail == "RUNNING (task 0 RUNNING)"
    assert connector_check("orders-outbox", None, None).ok
    assert not connector_check("orders-outbox", None, None, expect_running=True).ok


def test_record_bytes_counts_key_value_and_headers():
    row = {
        "id": "0" * 36,
        "aggregatetype": "order",
        "aggregateid": "o-1",
        "type": "OrderPlaced",
        "payload": '{"n": 1}',
        "traceparent": None,
        "headers": None,
        "schema_version": "1",
        "created_at": "2026-11-23 00:00:00+00",
    }
    names = sum(map(len, ("id", "eventType", "aggregateType", "traceparent", "headers")))
    names += len("schemaVersion")
    framing = RECORD_OVERHEAD_BYTES + 6 * HEADER_OVERHEAD_BYTES  # as publish counts it
    assert record_bytes(row) == 3 + 8 + names + 36 + 11 + 5 + 1 + framing


def _string(text: str) -> bytes:
    return text.encode() + b"\0"


def _relation(relid: int, columns: list[str]) -> bytes:
    body = b"R" + struct.pack("!I", relid) + _string("public") + _string("outbox") + b"d"
    body += struct.pack("!H", len(columns))
    for name in columns:
        body += b"\0" + _string(name) + struct.pack("!Ii", 25, -1)
    return body


def _insert(relid: int, values: list[str | None]) -> bytes:
    body = b"I" + struct.pack("!I", relid) + b"N" + struct.pack("!H", len(values))
    for value in values:
        raw = None if value is None else value.encode()
        body += b"n" if raw is None else b"t" + struct.pack("!I", len(raw)) + raw
    return body


def test_pgoutput_inserts_are_decoded_with_their_relation_and_the_rest_skipped():
    messages = [
        ("0/1", b"B" + bytes(20)),
        ("0/1", _relation(7, ["id", "payload", "headers"])),
        ("0/2", _insert(7, ["e-1", '{"a": "ü"}', None])),
        ("0/3", b"C" + bytes(25)),
    ]
    rows = list(inserted_rows(messages))
    assert len(rows) == 1
    assert (rows[0].lsn, rows[0].schema, rows[0].table) == ("0/2", "public", "outbox")
    assert rows[0].values == {"id": "e-1", "payload": '{"a": "ü"}', "headers": None}


def test_a_client_without_a_connect_url_raises_connect_error():
    """A stack whose Connect is external but unset reports UNREACHABLE instead of crashing."""
    from cdc.connect import ConnectClient, ConnectError

    with pytest.raises(ConnectError, match="no Kafka Connect REST URL"):
        ConnectClient("").status("any")
