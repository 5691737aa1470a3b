"""`outboxkit inbox status|parked|show|skip|redrive|rewind|rebase`: a consumer's inbox state,
its parked records and what an operator does with them."""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from typing import Any

from outboxkit.endpoints import resolve
from outboxkit.kernel.engines import engine_for
from outboxkit.settings import Settings


def _inbox(args: argparse.Namespace, settings: Settings) -> int:
    from rich.console import Console
    from rich.table import Table

    from inbox import operations

    if args.action == "redrive":
        return _inbox_redrive(args)
    engine = resolve(settings).engine(args.url)
    if args.action == "rewind":
        previous = operations.rewind(engine, args.consumer, args.topic, args.partition, args.offset)
        print(
            f"rewound {args.consumer} {args.topic}[{args.partition}]: {previous} -> {args.offset}"
        )
        return 0
    if args.action == "rebase":
        return _inbox_rebase(args, engine, resolve(settings).kafka())
    if args.action == "show":
        return _inbox_show(engine, _parked_id(args), as_json=args.json, full=args.full)
    if args.action == "skip":
        if not args.reason:
            raise ValueError("skip needs --reason (recorded with the skipped record)")
        row = operations.skip(
            engine, _parked_id(args), by=args.by or getpass.getuser(), reason=args.reason
        )
        print(
            f"skipped parked record {row['id']}: {row['consumer']} {row['topic']}"
            f"[{row['partition']}] offset {row['offset']} (key {row['key']!r}); "
            "records of its key parked behind it stay parked until the key is redriven"
        )
        return 0
    rows = (
        operations.status(engine, args.consumer)
        if args.action == "status"
        else operations.list_parked(engine, args.consumer, limit=args.limit)
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


def _inbox_rebase(args: argparse.Namespace, engine: Any, kafka: dict[str, str]) -> int:
    """Start over the partitions of a consumer's topic whose offsets moved (stopped, or of
    another topic identity than the topic's today): watermark at ``--offset`` (-1: read the
    topic from its start; the sources' positions, where the records carry them, decide what
    was applied). ``--dry-run`` prints what would happen to each partition."""
    from inbox import moves
    from spark_consumers.identity import TopicIdentities

    if not args.consumer or not args.topic:
        raise ValueError("rebase needs --consumer and --topic")
    current = TopicIdentities(kafka).read([args.topic]).get(args.topic)
    if current is None:
        raise ValueError(f"topic {args.topic} does not exist on {kafka['bootstrap.servers']}")
    found = [
        m
        for m in moves.moved(engine, args.consumer, {args.topic: current}, [args.topic])
        if args.partition_given is None or m.partition == args.partition_given
    ]
    if not found:
        print(f"{args.consumer} {args.topic}: no partition is stopped or of another topic id")
        return 0
    offset = -1 if args.offset is None else args.offset
    for move in found:
        judged = "by its sources' positions" if move.positions else "by offset only"
        print(
            f"{'would start' if args.dry_run else 'started'} {move.consumer} "
            f"{move.topic}[{move.partition}] over: watermark {move.watermark} -> {offset} for "
            f"{current.describe()} (was: {move.describe()}); its records judged {judged}"
        )
        if not args.dry_run:
            moves.start_over(engine, move, current)
            if offset != -1:
                from inbox import operations

                operations.rewind(engine, move.consumer, move.topic, move.partition, offset)
    if not args.dry_run:
        print("restart the consumer job: it reads these partitions from the inbox's positions")
    return 0


def _parked_id(args: argparse.Namespace) -> int:
    if args.id is None:
        raise ValueError(f"{args.action} needs --id (the id column of `outboxkit inbox parked`)")
    return int(args.id)


def _inbox_redrive(args: argparse.Namespace) -> int:

    from inbox import operations
    from outbox import at_commit
    from outboxkit.kernel.wire.record import key_text
    from spark_consumers.job import load_job

    if not args.job:
        raise ValueError("redrive needs --job module:attr (its handlers apply the records)")
    job = load_job(args.job)
    inbox = job.inbox(at_commit.attach(engine_for(job.engine_url(), "once")))
    topic, partition, key = args.topic, args.partition, args.key
    if args.id is not None:  # the parked record's partition and exact key
        found = operations.show(inbox.engine, int(args.id))
        if found is None or found["state"] != "parked" or found["consumer"] != inbox.consumer:
            raise ValueError(f"no parked record {args.id} of consumer {inbox.consumer}")
        topic, partition, key = found["topic"], found["partition"], key_text(found["raw_key"])
    if not topic:
        raise ValueError("redrive needs --topic (and --partition), or --id")
    result = operations.redrive(inbox, topic, partition, key=key)
    print(
        f"redrive: {result.applied} applied, {result.skipped} already applied, "
        f"{result.still_parked} still parked"
    )
    return 0 if result.still_parked == 0 else 1


def _inbox_show(engine: Any, parked_id: int, *, as_json: bool, full: bool) -> int:
    """One parked (or skipped) record: readable fields, then the raw bytes (base64 in JSON)."""
    from inbox import operations

    found = operations.show(engine, parked_id)
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


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    inbox = sub.add_parser(
        "inbox", help="inbox state: status, parked (list, show, skip), redrive, rewind, rebase"
    )
    inbox.add_argument(
        "action",
        choices=["status", "parked", "show", "skip", "redrive", "rewind", "rebase"],
        help="status: watermarks and parked counts; parked: list parked records; show: one "
        "record; skip: give one up; redrive: apply parked records again; rewind: set a "
        "watermark; rebase: start over partitions whose offsets moved (re-created topic, "
        "another cluster)",
    )
    inbox.add_argument(
        "--dry-run", action="store_true", help="rebase: print what would happen, change nothing"
    )
    inbox.add_argument("--id", type=int, help="show/skip/redrive: a parked record's id")
    inbox.add_argument("--reason", help="skip: why (recorded)")
    inbox.add_argument("--by", help="skip: who (recorded; default: the OS user)")
    inbox.add_argument("--full", action="store_true", help="show: raw bytes whole")
    inbox.add_argument("--url", help="the consumer's database (default: settings, local stack)")
    inbox.add_argument("--consumer", help="the inbox consumer name (default: all; rewind: needed)")
    inbox.add_argument("--job", help="redrive: module:attr of the Job whose handlers apply")
    inbox.add_argument("--topic", help="redrive/rewind: the topic")
    inbox.add_argument("--partition", type=int, default=0, help="redrive/rewind: the partition")
    inbox.add_argument("--key", help="redrive only this key")
    inbox.add_argument(
        "--only-partition",
        dest="partition_given",
        type=int,
        help="rebase: this partition only (default: every moved one)",
    )
    inbox.add_argument(
        "--offset", type=int, help="rewind: the new watermark; rebase: it (default -1: from start)"
    )
    inbox.add_argument("--limit", type=int, default=100, help="parked: rows to list at most")
    inbox.add_argument("--json", action="store_true", help="status/parked/show: print JSON")
    inbox.set_defaults(run=_inbox)
