"""`outboxkit cdc preflight|restart|supervise|raise-limit|restore-limit|add-partitions`: CDC's
checks, the way out of a FAILED connector task, and adding partitions to an outbox topic."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from outboxkit.endpoints import resolve
from outboxkit.settings import Settings

if TYPE_CHECKING:
    from cdc.connect import ConnectClient


def _cdc(args: argparse.Namespace, settings: Settings) -> int:
    from cdc import recovery
    from cdc.preflight import connector_check, run_checks
    from outboxkit.kernel.kafka.security import librdkafka_config

    endpoints = resolve(settings)
    client = endpoints.connect() if endpoints.connect_url else None
    bootstrap = endpoints.bootstrap_servers
    name = (args.connector_names or [settings.connector_name])[0]
    if args.action == "supervise":
        if client is None:
            raise ValueError("set OUTBOXKIT_CONNECT_URL")
        return _supervise(client, args)
    if args.action != "preflight":
        if client is None or bootstrap is None:
            raise ValueError("set OUTBOXKIT_CONNECT_URL and OUTBOXKIT_KAFKA_BOOTSTRAP_SERVERS")
        kafka_config = librdkafka_config(endpoints.kafka_security)
        if args.action == "add-partitions":
            return _add_partitions(client, endpoints, name, args)
        if args.action == "restart":
            status = recovery.restart_failed(client, name)
        elif args.action == "raise-limit":
            if not args.topic or not args.max_bytes:
                raise ValueError("raise-limit needs --topic and --max-bytes (see stack status)")
            status = recovery.raise_record_limit(
                client,
                bootstrap,
                connector=name,
                topics=args.topic,
                max_bytes=args.max_bytes,
                kafka_config=kafka_config,
            )
        else:
            status = recovery.restore_record_limit(
                client,
                bootstrap,
                connector=name,
                topics=args.topic or [],
                kafka_config=kafka_config,
            )
        print(f"connector {name}: {status.state}, tasks {[t[1] for t in status.tasks]}")
        return 0
    url = endpoints.database_url(args.url)
    engine = endpoints.engine(args.url)
    with engine.connect() as conn:
        checks = run_checks(
            conn,
            slot_name=settings.slot_name,
            publication_name=settings.publication_name,
            expect_slot=args.expect_slot,
        )
    if client is not None:  # the connector's status, when a Connect URL is known
        current = client.status(name)
        diagnosis = recovery.diagnose_connector(
            client, name, database_url=url, bootstrap_servers=bootstrap, status=current
        )
        checks.append(connector_check(name, current, diagnosis, expect_running=args.expect_slot))
    for check in checks:
        print(f"[{'ok' if check.ok else 'FAIL'}] {check.name}: {check.detail}")
    return 0 if all(c.ok for c in checks) else 1


def _add_partitions(
    client: ConnectClient, endpoints: Any, connector: str, args: argparse.Namespace
) -> int:
    """Pause the connector, wait until the consumers applied every partition, add the
    partitions, resume (`cdc.partitions`); --dry-run prints the plan."""
    from sqlalchemy import select

    from cdc import partitions
    from inbox import moves
    from inbox.tables import watermarks

    if not args.topic or len(args.topic) != 1 or not args.partitions or not args.consumer:
        raise ValueError("add-partitions needs one --topic, --partitions N and --consumer C")
    topic, kafka = args.topic[0], endpoints.kafka()
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

    def drained() -> None:
        for consumer in args.consumer:
            floor = moves.raise_floors(engine, consumer, topic, chosen.after)
            if floor:
                print(f"{consumer}: every partition's source positions raised to {floor}")
            else:
                print(
                    f"warning: {consumer} has no source positions on {topic} (records written "
                    "without them): a re-send landing in a new partition is caught only by "
                    "that partition's window, which starts empty",
                    file=sys.stderr,
                )

    partitions.add_partitions(
        client, kafka, chosen, applied, drained=drained, timeout=args.drain_timeout
    )
    return 0


def _supervise(client: ConnectClient, args: argparse.Namespace) -> int:
    """Restart the connectors' FAILED tasks with backoff until stopped (SIGTERM, Ctrl-C)."""
    import signal
    import threading

    from cdc.supervisor import Supervisor

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    which = ", ".join(args.connector_names) if args.connector_names else "every connector"
    print(f"supervising {which} on {client.url} every {args.interval:g}s", flush=True)
    Supervisor(client, echo=lambda line: print(line, flush=True)).run(
        args.connector_names, interval=args.interval, stop=stop, alive_file=args.alive_file
    )
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cdc = sub.add_parser("cdc", help="CDC checks; the way out of a FAILED connector task")
    cdc.add_argument(
        "action",
        choices=[
            "preflight",
            "restart",
            "supervise",
            "raise-limit",
            "restore-limit",
            "add-partitions",
        ],
        help="preflight: check the database (and the connector) for CDC; restart: restart a "
        "FAILED task; supervise: keep restarting FAILED tasks with backoff (runs until stopped); "
        "raise-limit/restore-limit: the record size limit of the topics; add-partitions: pause "
        "the connector, let the consumers drain, add partitions, resume (keeps per-key order)",
    )
    cdc.add_argument("--url", help="database URL (default: settings, then the local stack)")
    cdc.add_argument("--expect-slot", action="store_true", help="fail if the slot is missing")
    cdc.add_argument(
        "--connector",
        dest="connector_names",
        action="append",
        help="connector name (default: settings); supervise takes it more than once and, "
        "without it, watches every connector of the Connect cluster",
    )
    cdc.add_argument(
        "--interval", type=float, default=5.0, help="supervise: seconds between status checks"
    )
    cdc.add_argument(
        "--alive-file",
        type=Path,
        help="supervise: a file touched after every check (for a container's health check)",
    )
    cdc.add_argument("--topic", action="append", help="raise/restore-limit: topic (repeatable)")
    cdc.add_argument("--max-bytes", type=int, help="raise-limit: the record limit to allow")
    cdc.add_argument("--partitions", type=int, help="add-partitions: the topic's new count")
    cdc.add_argument(
        "--consumer",
        action="append",
        help="add-partitions: an inbox consumer of the topic, in --url's database (repeatable)",
    )
    cdc.add_argument(
        "--drain-timeout",
        type=float,
        default=600.0,
        help="add-partitions: seconds to wait for the consumers (default 600)",
    )
    cdc.add_argument("--dry-run", action="store_true", help="add-partitions: print the plan")
    cdc.set_defaults(run=_cdc)
