"""`outboxkit cdc prepare|apply|plugin|preflight|restart|supervise|raise-limit|restore-limit|
add-partitions`: CDC's set-up (`outboxkit.commands.cdc_setup`, `outboxkit.commands.cdc_plugin`)
and checks, the way out of a FAILED connector task, and adding partitions to an outbox topic."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from outboxkit.commands import cdc_plugin, cdc_setup
from outboxkit.parsers import SubParsers, add_url, command, group

if TYPE_CHECKING:
    from cdc.connect import ConnectClient, ConnectorStatus
    from outboxkit.settings import Settings


def _preflight(args: argparse.Namespace, settings: Settings) -> int:
    """The database's CDC checks, and the connector's status when a Connect URL is known."""
    from cdc import recovery
    from cdc.preflight import connector_check, run_checks
    from outboxkit.endpoints import resolve

    endpoints = resolve(settings)
    name = args.connector or settings.connector_name
    url = endpoints.database_url(args.url)
    engine = endpoints.engine(args.url)
    with engine.connect() as conn:
        checks = run_checks(
            conn,
            slot_name=settings.slot_name,
            publication_name=settings.publication_name,
            expect_slot=args.expect_slot,
        )
    if endpoints.connect_url:  # the connector's status, when a Connect URL is known
        client = endpoints.connect()
        current = client.status(name)
        diagnosis = recovery.diagnose_connector(
            client,
            name,
            database_url=url,
            bootstrap_servers=endpoints.bootstrap_servers,
            status=current,
        )
        checks.append(connector_check(name, current, diagnosis, expect_running=args.expect_slot))
    if args.json:
        print(json.dumps([{"check": c.name, "ok": c.ok, "detail": c.detail} for c in checks]))
    else:
        for check in checks:
            print(f"[{'ok' if check.ok else 'FAIL'}] {check.name}: {check.detail}")
    return 0 if all(c.ok for c in checks) else 1


def _restart(args: argparse.Namespace, settings: Settings) -> int:
    from cdc import recovery
    from outboxkit.endpoints import resolve

    name = args.connector or settings.connector_name
    return _print_status(name, recovery.restart_failed(resolve(settings).connect(), name))


def _raise_limit(args: argparse.Namespace, settings: Settings) -> int:
    from cdc import recovery
    from outboxkit.endpoints import resolve

    endpoints = resolve(settings)
    name = args.connector or settings.connector_name
    status = recovery.raise_record_limit(
        endpoints.connect(),
        _bootstrap(endpoints),
        connector=name,
        topics=args.topic,
        max_bytes=args.max_bytes,
        kafka_config=_kafka_config(endpoints),
    )
    return _print_status(name, status)


def _restore_limit(args: argparse.Namespace, settings: Settings) -> int:
    from cdc import recovery
    from outboxkit.endpoints import resolve

    endpoints = resolve(settings)
    name = args.connector or settings.connector_name
    status = recovery.restore_record_limit(
        endpoints.connect(),
        _bootstrap(endpoints),
        connector=name,
        topics=args.topic or [],
        kafka_config=_kafka_config(endpoints),
    )
    return _print_status(name, status)


def _bootstrap(endpoints: Any) -> str:
    return str(endpoints.kafka()["bootstrap.servers"])  # raises what to set when unknown


def _kafka_config(endpoints: Any) -> dict[str, str]:
    from outboxkit.kernel.kafka.security import librdkafka_config

    return librdkafka_config(endpoints.kafka_security)


def _print_status(name: str, status: ConnectorStatus) -> int:
    print(f"connector {name}: {status.state}, tasks {[t[1] for t in status.tasks]}")
    return 0


def _add_partitions_command(args: argparse.Namespace, settings: Settings) -> int:
    from outboxkit.endpoints import resolve

    endpoints = resolve(settings)
    name = args.connector or settings.connector_name
    return _add_partitions(endpoints.connect(), endpoints, name, args)


def _add_partitions(
    client: ConnectClient, endpoints: Any, connector: str, args: argparse.Namespace
) -> int:
    """Pause the connector, wait until the consumers applied every partition, add the
    partitions, resume (`cdc.partitions`); --dry-run prints the plan."""
    from sqlalchemy import select

    from cdc import partitions
    from cdc.config import source_identity_of
    from inbox import moves
    from inbox.tables import watermarks

    topic, kafka = args.topic, endpoints.kafka()
    chosen = partitions.plan(kafka, topic, args.partitions, connector)
    if args.dry_run:
        print(f"would {chosen.describe()} (consumers: {', '.join(args.consumer)})")
        return 0
    engine = endpoints.engine(args.url)

    def applied() -> dict[int, int]:
        query = select(watermarks.c.partition, watermarks.c.consumer, watermarks.c.offset).where(
            watermarks.c.topic == topic, watermarks.c.consumer.in_(args.consumer)
        )
        with engine.connect() as conn:
            rows = conn.execute(query).all()
        lowest: dict[int, int] = {}  # a consumer without a row yet counts as -1
        for p in range(chosen.before):
            marks = {c: int(o) for q, c, o in rows if int(q) == p}
            lowest[p] = min(marks.get(c, -1) for c in args.consumer)
        return lowest

    # The source the paused connector publishes as (its name, and its database's identity,
    # which a renamed source's positions stay keyed by): only its floors are raised.
    config = client.get_config(connector) or {}
    source = config.get("topic.prefix", "")
    databases = [i for i in [source_identity_of(config)] if i]

    def drained() -> None:
        for consumer in args.consumer:
            floor = moves.raise_floors(engine, consumer, topic, chosen.after, [source], databases)
            if floor:
                print(f"{consumer}: every partition's source positions raised to {floor}")
            else:
                print(
                    f"warning: {consumer} has no positions of source {source!r} on {topic} "
                    "(records written without them): a re-send landing in a new partition is "
                    "caught only by that partition's window, which starts empty",
                    file=sys.stderr,
                )

    partitions.add_partitions(
        client, kafka, chosen, applied, drained=drained, timeout=args.drain_timeout
    )
    return 0


def _supervise(args: argparse.Namespace, settings: Settings) -> int:
    """Restart the connectors' FAILED tasks with backoff until stopped (SIGTERM, Ctrl-C)."""
    import signal
    import threading

    from cdc.supervisor import Supervisor
    from outboxkit.endpoints import resolve

    client = resolve(settings).connect()

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    which = ", ".join(args.connector_names) if args.connector_names else "every connector"
    print(f"supervising {which} on {client.url} every {args.interval:g}s", flush=True)
    Supervisor(client, echo=lambda line: print(line, flush=True)).run(
        args.connector_names, interval=args.interval, stop=stop, alive_file=args.alive_file
    )
    return 0


CONNECTOR_HELP = "the connector's name (default: OUTBOXKIT_CONNECTOR_NAME)"


def add_parser(sub: SubParsers) -> None:
    actions = group(
        sub, "cdc", help="CDC set-up and checks; the way out of a FAILED connector task"
    )
    cdc_setup.add_parsers(actions)
    cdc_plugin.add_parsers(actions)
    preflight = command(
        actions,
        "preflight",
        _preflight,
        help="check the database (and the connector, when a Connect URL is known) for CDC",
    )
    add_url(preflight)
    preflight.add_argument(
        "--expect-slot", action="store_true", help="fail if the slot (or the connector) is missing"
    )
    preflight.add_argument("--connector", help=CONNECTOR_HELP)
    preflight.add_argument("--json", action="store_true", help="print the checks as JSON")
    restart = command(actions, "restart", _restart, help="restart a connector's FAILED tasks")
    restart.add_argument("--connector", help=CONNECTOR_HELP)
    supervise = command(
        actions,
        "supervise",
        _supervise,
        help="keep restarting FAILED tasks with backoff (runs until stopped)",
    )
    supervise.add_argument(
        "--connector",
        dest="connector_names",
        action="append",
        help="a connector to watch, repeatable (default: every connector of the Connect cluster)",
    )
    supervise.add_argument(
        "--interval", type=float, default=5.0, help="seconds between status checks"
    )
    supervise.add_argument(
        "--alive-file",
        type=Path,
        help="a file touched after every check (for a container's health check)",
    )
    raise_limit = command(
        actions,
        "raise-limit",
        _raise_limit,
        help="raise the record size limit of the topics and the connector's producer",
    )
    raise_limit.add_argument("--connector", help=CONNECTOR_HELP)
    raise_limit.add_argument("--topic", action="append", required=True, help="a topic, repeatable")
    raise_limit.add_argument(
        "--max-bytes",
        type=int,
        required=True,
        help="the record limit to allow (the failed record's size, as cdc preflight shows it)",
    )
    restore = command(
        actions, "restore-limit", _restore_limit, help="restore the topics' record size limit"
    )
    restore.add_argument("--connector", help=CONNECTOR_HELP)
    restore.add_argument(
        "--topic",
        action="append",
        help="a topic whose raised limit to remove, repeatable (default: none, the "
        "connector's producer only)",
    )
    partitions = command(
        actions,
        "add-partitions",
        _add_partitions_command,
        help="pause the connector, let the consumers drain, add partitions, resume (keeps "
        "per-key order)",
    )
    partitions.add_argument("--connector", help=CONNECTOR_HELP)
    partitions.add_argument("--topic", required=True, help="the outbox topic")
    partitions.add_argument(
        "--partitions", type=int, required=True, help="the topic's new partition count"
    )
    partitions.add_argument(
        "--consumer",
        action="append",
        required=True,
        help="an inbox consumer of the topic, in --url's database (repeatable)",
    )
    add_url(partitions)
    partitions.add_argument(
        "--drain-timeout",
        type=float,
        default=600.0,
        help="seconds to wait for the consumers to apply every partition",
    )
    partitions.add_argument("--dry-run", action="store_true", help="print the plan only")
