"""A FAILED outbox connector task: diagnosed from Connect and its slot, and the way out applied
(restart it; raise the record limit to let a too-large event through, then restore it)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace

from confluent_kafka import KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from sqlalchemy import text
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import SQLAlchemyError

from cdc.connect import ConnectClient, ConnectError, ConnectorStatus, wait_for_state
from cdc.health import Diagnosis, OversizedEvent, Site, diagnose, is_record_too_large, record_bytes
from cdc.limits import PRODUCER_MAX_REQUEST_SIZE
from cdc.pgoutput import inserted_rows
from outboxkit.kernel.engines import engine_for
from outboxkit.kernel.kafka.security import QUIET_LOGS

PRODUCER_OVERRIDE = "producer.override.max.request.size"
TOPIC_LIMIT = "max.message.bytes"
ROUTED = "${routedByValue}"
# pgoutput message kinds 'R' (relation) and 'I' (insert), filtered in SQL: the slot may hold
# much WAL, and only the relations and the large inserts need to leave the server.
_PEEK = text(
    "SELECT lsn::text, data FROM pg_logical_slot_peek_binary_changes("
    "  :slot, NULL, :changes, 'proto_version', '1', 'publication_names', :publication) "
    "WHERE get_byte(data, 0) = 82 OR (get_byte(data, 0) = 73 AND octet_length(data) > :over)"
)


class LimitError(RuntimeError):
    """A topic's record limit could not be changed; the message says which and why."""


def oversized_events(
    connection: Connection,
    config: dict[str, str],
    *,
    over_bytes: int = PRODUCER_MAX_REQUEST_SIZE,
    changes: int = 100_000,
) -> tuple[OversizedEvent, ...]:
    """The outbox events waiting in the connector's (inactive) slot whose records are over
    ``over_bytes``, in commit order; a peek, the slot does not move."""
    rows = connection.execute(
        _PEEK,
        {
            "slot": config["slot.name"],
            "publication": config["publication.name"],
            "changes": changes,
            # A prefilter only: an insert message holds every column its record carries.
            "over": over_bytes // 2,
        },
    )
    route = config.get("transforms.outbox.route.topic.replacement", f"outbox.event.{ROUTED}")
    events = []
    for row in inserted_rows((lsn, bytes(data)) for lsn, data in rows):
        v = row.values
        if "aggregatetype" in v and (size := record_bytes(v)) > over_bytes:
            topic = route.replace(ROUTED, v["aggregatetype"] or "")
            key, event_type = v.get("aggregateid") or "", v.get("type") or ""
            events.append(OversizedEvent(row.lsn, v.get("id") or "", topic, key, event_type, size))
    return tuple(events)


def diagnose_connector(
    client: ConnectClient,
    name: str,
    *,
    database_url: str | URL | None = None,
    bootstrap_servers: str | None = None,
    status: ConnectorStatus | None = None,
) -> Diagnosis | None:
    """The connector's failure and way out, or None when it is not FAILED. With the URL of its
    Postgres server (any database), a too-large record is looked up in the slot. ``status``:
    the connector's status when the caller has just read it (else it is read here)."""
    status = status or client.status(name)
    if status is None or status.failure is None:
        return None
    config = client.get_config(name) or {}
    slot, publication = config.get("slot.name", "?"), config.get("publication.name", "?")
    site = Site(name, client.url, slot, publication, bootstrap_servers or "KAFKA")
    oversized: tuple[OversizedEvent, ...] = ()
    unread = None
    if database_url and "database.dbname" in config and is_record_too_large(status):
        url = make_url(database_url).set(database=config["database.dbname"])
        engine = engine_for(url, "once")
        try:
            with engine.connect() as conn:
                oversized = oversized_events(conn, config)
        except SQLAlchemyError as exc:  # e.g. the task restarted and holds the slot again
            unread = f"(slot {slot} could not be read: {str(exc).splitlines()[0]})"
        finally:
            engine.dispose()
    found = diagnose(status, site, oversized)
    if found is not None and unread:
        found = replace(found, way_out=(unread, *found.way_out))
    return found


def _set_topic_limit(
    bootstrap: str,
    topics: Sequence[str],
    value: int | None,
    kafka_config: Mapping[str, str] | None = None,
) -> None:
    """Set (or, with None, delete) the topics' max.message.bytes."""
    if not topics:
        return
    op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
    entry = ConfigEntry(TOPIC_LIMIT, str(value or ""), incremental_operation=op)
    resources = [ConfigResource(ResourceType.TOPIC, t, incremental_configs=[entry]) for t in topics]
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET_LOGS, **(kafka_config or {})})
    for resource, future in admin.incremental_alter_configs(resources).items():
        try:
            future.result(timeout=30)
        except KafkaException as exc:
            raise LimitError(f"{TOPIC_LIMIT} of topic {resource.name}: {exc}") from exc


def _wait_recovered(client: ConnectClient, name: str, timeout: float) -> ConnectorStatus:
    """Wait until every task RUNS. A FAILED status is trusted after a grace period only: the
    restart reaches the status topic a moment after Connect accepted it."""
    start = time.monotonic()

    def trusted() -> ConnectorStatus | None:
        status = client.status(name)
        late = time.monotonic() - start > min(15.0, timeout)
        if status is not None and status.failure and late:
            raise ConnectError(f"connector {name} still failed:\n{status.failure}")
        return status

    return wait_for_state(trusted, name, "RUNNING", timeout=timeout)


def _config(client: ConnectClient, name: str) -> dict[str, str]:
    config = client.get_config(name)
    if config is None:
        raise ConnectError(f"connector {name} does not exist on {client.url}")
    return config


def restart_failed(client: ConnectClient, name: str, *, timeout: float = 120.0) -> ConnectorStatus:
    """Restart the connector's FAILED tasks; they resume from the last committed offset."""
    client.restart(name, only_failed=True)
    return _wait_recovered(client, name, timeout)


def raise_record_limit(
    client: ConnectClient,
    bootstrap: str,
    *,
    connector: str,
    topics: Sequence[str],
    max_bytes: int,
    timeout: float = 120.0,
    kafka_config: Mapping[str, str] | None = None,
) -> ConnectorStatus:
    """Let records up to ``max_bytes`` through: the topics' max.message.bytes, the connector's
    producer max.request.size, then restart the failed task (nothing after it is lost)."""
    _set_topic_limit(bootstrap, topics, max_bytes, kafka_config)
    config = _config(client, connector)
    if config.get(PRODUCER_OVERRIDE) != str(max_bytes):
        client.put_config(connector, {**config, PRODUCER_OVERRIDE: str(max_bytes)})
    return restart_failed(client, connector, timeout=timeout)


def restore_record_limit(
    client: ConnectClient,
    bootstrap: str,
    *,
    connector: str,
    topics: Sequence[str],
    timeout: float = 120.0,
    kafka_config: Mapping[str, str] | None = None,
) -> ConnectorStatus:
    """Back to the cluster's limits once the large event is through: the connector's producer
    override and the topics' max.message.bytes removed (the records already written stay)."""
    config = _config(client, connector)
    if PRODUCER_OVERRIDE in config:
        del config[PRODUCER_OVERRIDE]
        client.put_config(connector, config)
    _set_topic_limit(bootstrap, topics, None, kafka_config)
    return _wait_recovered(client, connector, timeout)
