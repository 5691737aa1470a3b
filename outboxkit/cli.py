"""The `outboxkit` command line: stack, db, outbox, cdc, consume, inbox, audit and demo commands.

The operator commands (db, outbox, cdc, consume, inbox, audit) read `outboxkit.settings.Settings`
and find their endpoints through `outboxkit.endpoints`; only the commands that run the local stack
(stack, demo, saga, chaos, bench) read the dev stack's settings and build it."""

from __future__ import annotations

import argparse
import getpass
import json
import logging
import sys
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from devstack.settings import StackSettings
from outboxkit.endpoints import resolve
from outboxkit.settings import Settings


def _stack(args: argparse.Namespace, settings: StackSettings) -> int:
    from devstack import artifacts
    from devstack.stack import Stack

    if args.action == "install":
        found = artifacts.locate(settings.cache_dir, install=True)
        v = found.versions
        print(
            f"stack install: Apache Kafka {v.kafka}, Debezium {v.debezium}, Spark Kafka connector "
            f"{v.spark} in {found.broker_libs.parent}"
        )
        return 0
    stack = Stack(settings)
    if args.action == "up":
        stack.up()
        _print_status(stack.status(), as_json=False)
        return 0
    from outboxkit.runtime import recorded_saga

    saga = recorded_saga(stack)
    if args.action == "down":
        if saga is not None:  # the saga's processes first: they use the stack
            saga.stop()
        stack.down(keep_data=args.keep_data)
        if not args.keep_data:
            from saga_harness.processes import drop_checkpoints

            drop_checkpoints(stack.dir / "saga")
        return 0
    report = stack.status()
    processes = saga.status() if saga is not None and report["up"] else []
    if processes:
        report["processes"] = processes
    _print_status(report, as_json=args.json)
    healthy = all(p["health"] in ("ready", "running") for p in processes)
    return 0 if report["up"] and not report.get("failures") and healthy else 1


def _print_status(report: dict[str, object], *, as_json: bool) -> None:
    if as_json:
        print(json.dumps(report, indent=2, default=str))
        return
    from rich.console import Console
    from rich.table import Table

    from cdc.health import describe

    if "postgres" not in report:
        print(f"stack: not up ({report['stack_dir']})")
        return
    table = Table(title=f"outboxkit stack ({report['stack_dir']})")
    for column in ("component", "mode", "running", "pid", "endpoint"):
        table.add_column(column)
    for name in ("postgres", "broker", "connect", "spark"):
        comp = report.get(name)
        if not isinstance(comp, dict):
            continue
        running = {True: "yes", False: "NO", None: comp["mode"]}[comp["running"]]
        table.add_row(name, comp["mode"], running, str(comp["pid"] or ""), comp["endpoint"])
    Console().print(table)
    nodes = report.get("nodes") or []
    assert isinstance(nodes, list)
    if nodes:
        by_node = Table(title="nodes")
        for column in ("engine", "node", "role", "pid", "endpoint", "health"):
            by_node.add_column(column)
        for node in nodes:
            by_node.add_row(
                node["engine"],
                node["name"],
                node["role"],
                str(node["pid"] or ""),
                node["endpoint"],
                node["health"],
            )
        Console().print(by_node)
    print(f"connectors: {report['connectors']}")
    print(f"slots:      {report['slots']}")
    failures = report.get("failures") or {}
    assert isinstance(failures, dict)
    for name, failure in failures.items():
        print("\n".join(describe(name, failure)))
    processes = report.get("processes")
    if isinstance(processes, list):
        from outboxkit.runtime import print_processes

        print_processes(processes)


def _db(args: argparse.Namespace, settings: Settings) -> int:
    from migrations import runner

    url = resolve(settings).database_url(args.url)
    if args.action == "upgrade":
        runner.upgrade(url, args.revision or "head")
    elif args.action == "downgrade":
        runner.downgrade(url, args.revision or "base")
    print(f"database at revision {runner.current(url)} (head {runner.head()})")
    return 0


def _outbox(args: argparse.Namespace, settings: Settings) -> int:
    from outbox import cleanup

    engine = resolve(settings).engine(args.url)
    deleted = cleanup.cleanup(engine, older_than=timedelta(hours=args.older_than_hours))
    with engine.connect() as conn:
        left = cleanup.count(conn)
    print(
        f"outbox cleanup: deleted {deleted} rows older than {args.older_than_hours}h, {left} left"
    )
    return 0


def _cdc(args: argparse.Namespace, settings: Settings) -> int:
    from cdc import recovery
    from cdc.preflight import connector_check, run_checks
    from outbox.kafka.security import librdkafka_config

    endpoints = resolve(settings)
    client = endpoints.connect() if endpoints.connect_url else None
    bootstrap = endpoints.bootstrap_servers
    name = args.connector or settings.connector_name
    if args.action != "preflight":
        if client is None or bootstrap is None:
            raise ValueError("set OUTBOXKIT_CONNECT_URL and OUTBOXKIT_KAFKA_BOOTSTRAP_SERVERS")
        kafka_config = librdkafka_config(endpoints.kafka_security)
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


def _consume(args: argparse.Namespace, settings: Settings) -> int:
    from rich.console import Console

    from devstack.artifacts import cached_spark_jars
    from spark_consumers.job import load_job
    from spark_consumers.runner import run_jobs

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)  # one line per JVM call otherwise
    console = Console()
    jobs = [load_job(spec) for spec in args.jobs]

    def report(name: str, batch_id: int, rows: list[dict[str, object]]) -> None:
        applied = sum(int(str(r["applied"])) for r in rows)
        skipped = sum(int(str(r["skipped"])) for r in rows)
        parked = sum(int(str(r["parked"])) for r in rows)
        published = sum(int(str(r["published"])) for r in rows)
        retries = sum(int(str(r["retries"])) for r in rows)
        console.print(
            f"{name} batch {batch_id}: {applied} applied, {skipped} skipped, "
            f"{parked} parked, {published} published over {len(rows)} partition(s)"
            + (f", {retries} retries (database unreachable)" if retries else "")
        )

    console.print(f"consuming {', '.join(j.name for j in jobs)} (checkpoints in {args.checkpoint})")
    metrics = _consumer_metrics(args, settings, jobs, console)
    listeners = [] if metrics is None else [metrics.listener]

    def on_batch(name: str, batch_id: int, rows: list[dict[str, object]]) -> None:
        report(name, batch_id, rows)
        if metrics is not None:
            metrics.on_batch(name, batch_id, rows)

    try:
        run_jobs(
            jobs,
            checkpoint=Path(args.checkpoint),
            trigger_seconds=args.trigger,
            once=args.once,
            on_batch=on_batch,
            jars=cached_spark_jars(settings.cache_dir),
            shared=not args.query_per_job,
            listeners=listeners,
        )
    finally:
        if metrics is not None:
            metrics.close()
    return 0


def _consumer_metrics(
    args: argparse.Namespace, settings: Settings, jobs: Sequence[Any], console: Any
) -> Any:
    """The driver's metrics, served when a port is set (--metrics-port, else settings)."""
    port = settings.consumer_metrics_port if args.metrics_port is None else args.metrics_port
    if port is None:
        return None
    from spark_consumers.metrics import DriverMetrics

    host = args.metrics_host or settings.consumer_metrics_host
    metrics = DriverMetrics(jobs)
    bound = metrics.serve(host, port)
    console.print(f"metrics on http://{host}:{bound}/metrics")
    return metrics


def _audit(args: argparse.Namespace, settings: Settings) -> int:
    from rich.console import Console
    from rich.table import Table
    from sqlalchemy import create_engine

    from spark_consumers.audit import CATEGORIES, audit
    from spark_consumers.job import load_job

    results = []
    for spec in args.jobs:
        job = load_job(spec)
        engine = create_engine(job.engine_url())
        try:
            with engine.connect() as conn:
                results.append(audit(job, conn))
        finally:
            engine.dispose()
    if args.json:
        print(json.dumps([r.as_dict() for r in results], indent=2))
    else:
        console = Console()
        for result in results:
            verdict = (
                "OK: nothing lost, nothing applied twice"
                if result.ok
                else "LOST OR DUPLICATE EVENTS"
                if result.exact
                else "no ledger: lost and duplicate cannot be counted (Job.ledger)"
            )
            table = Table(title=f"audit {result.consumer}: {verdict}")
            for column in ("topic", "partition", "watermark", "end", "events", *CATEGORIES):
                table.add_column(column, justify="left" if column == "topic" else "right")
            for p in result.partitions:
                table.add_row(
                    p.topic,
                    str(p.partition),
                    str(p.watermark),
                    str(p.end),
                    str(p.events),
                    *(str(p.counts[c]) for c in CATEGORIES),
                )
            table.add_row(
                "total",
                "",
                "",
                "",
                str(sum(p.events for p in result.partitions)),
                *(str(result.total(c)) for c in CATEGORIES),
            )
            console.print(table)
            for p in result.partitions:
                for category, examples in p.examples.items():
                    if examples:
                        print(f"  {category} on {p.topic}[{p.partition}]: {', '.join(examples)}")
            if result.ledger_only:
                print(f"  {result.ledger_only} applied event ids are no longer on the topics")
    if any(r.exact and not r.ok for r in results):
        return 1
    return 0 if all(r.exact for r in results) else 2


def _inbox(args: argparse.Namespace, settings: Settings) -> int:
    from rich.console import Console
    from rich.table import Table

    from inbox import admin

    if args.action == "redrive":
        return _inbox_redrive(args)
    engine = resolve(settings).engine(args.url)
    if args.action == "rewind":
        previous = admin.rewind(engine, args.consumer, args.topic, args.partition, args.offset)
        print(
            f"rewound {args.consumer} {args.topic}[{args.partition}]: {previous} -> {args.offset}"
        )
        return 0
    if args.action == "show":
        return _inbox_show(engine, _parked_id(args), as_json=args.json, full=args.full)
    if args.action == "skip":
        if not args.reason:
            raise ValueError("skip needs --reason (recorded with the skipped record)")
        row = admin.skip(
            engine, _parked_id(args), by=args.by or getpass.getuser(), reason=args.reason
        )
        print(
            f"skipped parked record {row['id']}: {row['consumer']} {row['topic']}"
            f"[{row['partition']}] offset {row['offset']} (key {row['key']!r}); "
            "records of its key parked behind it stay parked until the key is redriven"
        )
        return 0
    rows = (
        admin.status(engine, args.consumer)
        if args.action == "status"
        else admin.list_parked(engine, args.consumer, limit=args.limit)
    )
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
        return 0
    table = Table(title=f"inbox {args.action}")
    for column in rows[0].keys() if rows else ["(empty)"]:
        table.add_column(str(column))
    for row in rows:
        table.add_row(*(str(v) for v in row.values()))
    Console().print(table)
    return 0


def _parked_id(args: argparse.Namespace) -> int:
    if args.id is None:
        raise ValueError(f"{args.action} needs --id (the id column of `outboxkit inbox parked`)")
    return int(args.id)


def _inbox_redrive(args: argparse.Namespace) -> int:
    from sqlalchemy import create_engine

    from inbox import admin
    from outbox.wire.record import key_text
    from spark_consumers.job import load_job

    if not args.job:
        raise ValueError("redrive needs --job module:attr (its handlers apply the records)")
    job = load_job(args.job)
    inbox = job.inbox(create_engine(job.engine_url()))
    topic, partition, key = args.topic, args.partition, args.key
    if args.id is not None:  # the parked record's partition and exact key
        found = admin.show(inbox.engine, int(args.id))
        if found is None or found["state"] != "parked" or found["consumer"] != inbox.consumer:
            raise ValueError(f"no parked record {args.id} of consumer {inbox.consumer}")
        topic, partition, key = found["topic"], found["partition"], key_text(found["raw_key"])
    if not topic:
        raise ValueError("redrive needs --topic (and --partition), or --id")
    result = admin.redrive(inbox, topic, partition, key=key)
    print(
        f"redrive: {result.applied} applied, {result.skipped} already applied, "
        f"{result.still_parked} still parked"
    )
    return 0 if result.still_parked == 0 else 1


def _inbox_show(engine: Any, parked_id: int, *, as_json: bool, full: bool) -> int:
    """One parked (or skipped) record: readable fields, then the raw bytes (base64 in JSON)."""
    from inbox import admin

    found = admin.show(engine, parked_id)
    if found is None:
        print(f"no parked or skipped record with id {parked_id}", file=sys.stderr)
        return 1
    raw = ("raw_key", "raw_value", "raw_headers")
    if as_json:
        shown = {k: v for k, v in found.items() if k not in raw}
        shown["raw_key"] = _b64(found["raw_key"])
        shown["raw_value"] = _b64(found["raw_value"])
        shown["raw_headers"] = [[n, _b64(v)] for n, v in found["raw_headers"]]
        print(json.dumps(shown, indent=2, default=str))
        return 0
    for name, value in found.items():
        if name not in raw:
            print(f"{name:>13}: {value}")
    cut = None if full else 2000
    print(f"{'raw key':>13}: {_bytes(found['raw_key'], cut)}")
    print(f"{'raw value':>13}: {_bytes(found['raw_value'], cut)}")
    for header, value in found["raw_headers"]:
        print(f"{'header':>13}: {header!r} = {_bytes(value, cut)}")
    if not full:
        print("(byte strings cut at 2000 bytes; --full shows them whole, --json as base64)")
    return 0


def _b64(value: bytes | None) -> str | None:
    import base64

    return None if value is None else base64.b64encode(value).decode()


def _bytes(value: bytes | None, cut: int | None) -> str:
    if value is None:
        return "null"
    shown = repr(value if cut is None else value[:cut])
    return shown if cut is None or len(value) <= cut else f"{shown}... ({len(value)} bytes)"


def _demo(args: argparse.Namespace, settings: StackSettings) -> int:
    from outboxkit.demo import run_demo

    return run_demo(settings, orders=args.orders, keep_running=args.keep_running)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the `outboxkit` command."""
    parser = argparse.ArgumentParser(prog="outboxkit", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    stack = sub.add_parser("stack", help="the local stack: Postgres, broker, Connect + Debezium")
    stack.add_argument("action", choices=["install", "up", "down", "status"])
    stack.add_argument("--json", action="store_true", help="status as JSON")
    stack.add_argument("--keep-data", action="store_true", help="down: keep the Postgres data")
    stack.set_defaults(run=_stack, settings=StackSettings)

    db = sub.add_parser("db", help="framework migrations")
    db.add_argument("action", choices=["upgrade", "downgrade", "current"])
    db.add_argument("--url", help="database URL (default: settings, then the local stack)")
    db.add_argument("--revision")
    db.set_defaults(run=_db)

    outbox = sub.add_parser("outbox", help="outbox table maintenance (retain mode)")
    outbox.add_argument("action", choices=["cleanup"])
    outbox.add_argument("--older-than-hours", type=float, default=24.0)
    outbox.add_argument("--url")
    outbox.set_defaults(run=_outbox)

    cdc = sub.add_parser("cdc", help="CDC checks; the way out of a FAILED connector task")
    cdc.add_argument("action", choices=["preflight", "restart", "raise-limit", "restore-limit"])
    cdc.add_argument("--url")
    cdc.add_argument("--expect-slot", action="store_true", help="fail if the slot is missing")
    cdc.add_argument("--connector", help="connector name (default: settings)")
    cdc.add_argument("--topic", action="append", help="raise/restore-limit: topic (repeatable)")
    cdc.add_argument("--max-bytes", type=int, help="raise-limit: the record limit to allow")
    cdc.set_defaults(run=_cdc)

    consume = sub.add_parser("consume", help="run consumer jobs (Spark Structured Streaming)")
    consume.add_argument("jobs", nargs="+", metavar="JOB", help="module:attr of a Job")
    consume.add_argument("--trigger", type=float, default=1.0, help="seconds between batches")
    consume.add_argument("--checkpoint", default=".outboxkit/checkpoints")
    consume.add_argument("--once", action="store_true", help="apply what is there, then stop")
    consume.add_argument(
        "--query-per-job",
        action="store_true",
        help="one streaming query per job (default: one per Kafka cluster, each topic read once)",
    )
    consume.add_argument(
        "--metrics-port",
        type=int,
        help="serve Prometheus metrics on this port, 0: a free one "
        "(default: OUTBOXKIT_CONSUMER_METRICS_PORT; unset: none)",
    )
    consume.add_argument(
        "--metrics-host", help="metrics address (default: OUTBOXKIT_CONSUMER_METRICS_HOST)"
    )
    consume.set_defaults(run=_consume)

    inbox = sub.add_parser(
        "inbox", help="inbox state: status, parked (list, show, skip), redrive, rewind"
    )
    inbox.add_argument("action", choices=["status", "parked", "show", "skip", "redrive", "rewind"])
    inbox.add_argument("--id", type=int, help="show/skip/redrive: a parked record's id")
    inbox.add_argument("--reason", help="skip: why (recorded)")
    inbox.add_argument("--by", help="skip: who (recorded; default: the OS user)")
    inbox.add_argument("--full", action="store_true", help="show: raw bytes whole")
    inbox.add_argument("--url", help="the consumer's database (default: settings, local stack)")
    inbox.add_argument("--consumer")
    inbox.add_argument("--job", help="redrive: module:attr of the Job whose handlers apply")
    inbox.add_argument("--topic")
    inbox.add_argument("--partition", type=int, default=0)
    inbox.add_argument("--key", help="redrive only this key")
    inbox.add_argument("--offset", type=int, help="rewind: the new watermark")
    inbox.add_argument("--limit", type=int, default=100)
    inbox.add_argument("--json", action="store_true")
    inbox.set_defaults(run=_inbox)

    from outboxkit.bench.cli import add_parser as add_bench

    add_bench(sub)

    audit = sub.add_parser(
        "audit",
        help="every event on consumer jobs' topics: applied, duplicate, parked, pending, lost",
    )
    audit.add_argument("jobs", nargs="+", metavar="JOB", help="module:attr of a Job")
    audit.add_argument("--json", action="store_true")
    audit.set_defaults(run=_audit)

    from outboxkit.schemas_cli import add_parser as add_schemas

    add_schemas(sub)

    from outboxkit.runtime import add_parsers as add_runtime

    add_runtime(sub)

    demo = sub.add_parser("demo", help="the main job: the order saga on the local stack")
    demo.add_argument("--orders", type=int, default=300, help="how many orders to place")
    demo.add_argument("--keep-running", action="store_true", help="leave the stack and services up")
    demo.set_defaults(run=_demo, settings=StackSettings)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `outboxkit` console script."""
    args = build_parser().parse_args(argv)
    # The stack's commands read the dev stack's settings; every other command the operator's.
    settings_type: type[Settings | StackSettings] = getattr(args, "settings", Settings)
    settings = settings_type()
    run: Callable[[argparse.Namespace, Any], int] = args.run
    try:
        return run(args, settings)
    except KeyboardInterrupt:
        return 130
    except (RuntimeError, ValueError, LookupError) as exc:
        print(f"outboxkit: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
