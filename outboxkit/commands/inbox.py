"""`outboxkit inbox status|parked|show|skip|redrive|retry|rewind|rebase`: a consumer's inbox
state, its parked records and what an operator does with them."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from outboxkit.parsers import SubParsers, add_url, command, group

if TYPE_CHECKING:
    from outboxkit.settings import Settings


def _engine(args: argparse.Namespace, settings: Settings) -> Any:
    from outboxkit.endpoints import resolve

    return resolve(settings).engine(args.url)


def _status(args: argparse.Namespace, settings: Settings) -> int:
    from inbox import operations

    rows = operations.status(_engine(args, settings), args.consumer)
    return _print_rows("inbox status", rows, as_json=args.json)


def _parked(args: argparse.Namespace, settings: Settings) -> int:
    from inbox import operations

    rows = operations.list_parked(_engine(args, settings), args.consumer, limit=args.limit)
    if not args.json:  # when each is retried, or that it waits for a person
        rows = [{**r, "retry_at": r["retry_at"] or "parked"} for r in rows]
    return _print_rows("inbox parked", rows, as_json=args.json)


def _print_rows(title: str, rows: list[dict[str, Any]], *, as_json: bool) -> int:
    if as_json:
        print(json.dumps(rows, indent=2, default=str))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for column in rows[0].keys() if rows else ["(empty)"]:
        table.add_column(str(column))
    for row in rows:
        table.add_row(*(str(v) for v in row.values()))
    Console().print(table)
    return 0


def _show(args: argparse.Namespace, settings: Settings) -> int:
    return _inbox_show(_engine(args, settings), args.id, as_json=args.json, full=args.full)


def _skip(args: argparse.Namespace, settings: Settings) -> int:
    import getpass

    from inbox import operations

    row = operations.skip(
        _engine(args, settings), args.id, by=args.by or getpass.getuser(), reason=args.reason
    )
    print(
        f"skipped parked record {row['id']}: {row['consumer']} {row['topic']}"
        f"[{row['partition']}] offset {row['offset']} (key {row['key']!r}); "
        "records of its key parked behind it stay parked until the key is redriven"
    )
    return 0


def _rewind(args: argparse.Namespace, settings: Settings) -> int:
    from inbox import operations

    engine = _engine(args, settings)
    previous = operations.rewind(engine, args.consumer, args.topic, args.partition, args.offset)
    print(f"rewound {args.consumer} {args.topic}[{args.partition}]: {previous} -> {args.offset}")
    return 0


def _rebase(args: argparse.Namespace, settings: Settings) -> int:
    from outboxkit.endpoints import resolve

    return _inbox_rebase(args, _engine(args, settings), resolve(settings).kafka())


def _inbox_rebase(args: argparse.Namespace, engine: Any, kafka: dict[str, str]) -> int:
    """Start over the partitions of a consumer's topic whose offsets moved (stopped, or of
    another topic identity than the topic's today): watermark at ``--offset`` (-1: read the
    topic from its start; the sources' positions, where the records carry them, decide what
    was applied). ``--dry-run`` prints what would happen to each partition."""
    from inbox import moves
    from spark_consumers.identity import TopicIdentities

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
    offset = args.offset
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


def _redrive(args: argparse.Namespace, settings: Settings) -> int:
    """Apply a key's parked records again with the job's handlers; exit 1 if some stay parked."""
    from outboxkit.commands.errors import CommandError

    if args.id is None and not args.topic:
        raise CommandError("redrive needs --topic (and --partition), or --id")
    inbox = _job_inbox(args.job)
    from inbox import operations
    from outboxkit.kernel.wire.record import key_text

    topic, partition, key = args.topic, args.partition, args.key
    if args.id is not None:  # the parked record's partition and exact key
        found = operations.show(inbox.engine, int(args.id))
        if found is None or found["state"] != "parked" or found["consumer"] != inbox.consumer:
            raise ValueError(f"no parked record {args.id} of consumer {inbox.consumer}")
        topic, partition, key = found["topic"], found["partition"], key_text(found["raw_key"])
    result = operations.redrive(inbox, topic, partition, key=key)
    print(
        f"redrive: {result.applied} applied, {result.skipped} already applied, "
        f"{result.still_parked} still parked"
    )
    return 0 if result.still_parked == 0 else 1


def _retry(args: argparse.Namespace, settings: Settings) -> int:
    """Redrive a job's parked records whose delayed retry is due: once, or every second until
    interrupted (beside, or instead of, the consumer driver's retrier)."""
    import time

    from inbox import retry_due

    inbox = _job_inbox(args.job)
    try:
        while True:
            done = retry_due(inbox)
            if args.once or done.applied or done.skipped or done.still_parked:
                print(
                    f"retry {inbox.consumer}: {done.applied} applied, {done.skipped} already "
                    f"applied, {done.still_parked} still parked ({done.retrying} to retry)",
                    flush=True,
                )
            if args.once:
                return 0
            time.sleep(args.every)
    except KeyboardInterrupt:
        return 0
    finally:
        inbox.engine.dispose()


def _job_inbox(spec: str) -> Any:
    """The inbox of the job ``spec`` names, on its database, for an operator command."""
    from outbox import at_commit
    from outboxkit.commands.errors import load_job
    from outboxkit.kernel.engines import engine_for

    job = load_job(spec)
    return job.inbox(at_commit.attach(engine_for(job.engine_url(), "once")))


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
        if name == "history":
            for entry in value or ():  # one failure a line, oldest first
                retry = f", retry at {entry['retry_at']}" if entry.get("retry_at") else ""
                print(f"{'failed':>13}: {entry.get('at')}: {entry.get('error')}{retry}")
        elif name == "retry_at":
            print(f"{'retry at':>13}: {value or 'parked: waits for a person'}")
        elif name not in raw:
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


def add_parser(sub: SubParsers) -> None:
    actions = group(
        sub,
        "inbox",
        help="inbox state: status, parked (list, show, skip), redrive, retry, rewind, rebase",
    )
    status = command(actions, "status", _status, help="watermarks, window sizes and parked counts")
    status.add_argument("--consumer", help="the inbox consumer (default: every consumer)")
    _json(status)
    add_url(status)
    parked = command(actions, "parked", _parked, help="list parked records, oldest first")
    parked.add_argument("--consumer", help="the inbox consumer (default: every consumer)")
    parked.add_argument("--limit", type=int, default=100, help="rows to list at most")
    _json(parked)
    add_url(parked)
    show = command(
        actions, "show", _show, help="one parked (or skipped) record, its raw bytes included"
    )
    _parked_id(show)
    show.add_argument("--full", action="store_true", help="raw bytes whole (not cut at 2000)")
    _json(show)
    add_url(show)
    skip = command(actions, "skip", _skip, help="give up on one parked record, on the record")
    _parked_id(skip)
    skip.add_argument("--reason", required=True, help="why (recorded with the skipped record)")
    skip.add_argument("--by", help="who (recorded; default: the OS user)")
    add_url(skip)
    redrive = command(
        actions,
        "redrive",
        _redrive,
        help="apply a key's parked records again, with a job's (fixed) handlers; exits 1 when "
        "some stay parked",
    )
    _job(redrive)
    redrive.add_argument("--id", type=int, help="a parked record: redrive its key exactly")
    redrive.add_argument("--topic", help="the topic (without --id)")
    redrive.add_argument("--partition", type=int, default=0, help="the partition (without --id)")
    redrive.add_argument("--key", help="only this key (default: every parked key)")
    retry = command(
        actions,
        "retry",
        _retry,
        help="redrive a job's parked records whose delayed retry is due, every second (the "
        "consumer driver does too)",
    )
    _job(retry)
    retry.add_argument("--once", action="store_true", help="one pass, then exit")
    retry.add_argument("--every", type=float, default=1.0, help="seconds between passes")
    rewind = command(
        actions,
        "rewind",
        _rewind,
        help="move a partition's watermark back: the records above it are applied again",
    )
    rewind.add_argument("--consumer", required=True, help="the inbox consumer")
    rewind.add_argument("--topic", required=True, help="the topic")
    rewind.add_argument("--partition", type=int, default=0, help="the partition")
    rewind.add_argument("--offset", type=int, required=True, help="the new watermark")
    add_url(rewind)
    rebase = command(
        actions,
        "rebase",
        _rebase,
        help="start over the partitions whose offsets moved (a re-created topic, another cluster)",
    )
    rebase.add_argument("--consumer", required=True, help="the inbox consumer")
    rebase.add_argument("--topic", required=True, help="the topic")
    rebase.add_argument(
        "--only-partition",
        dest="partition_given",
        type=int,
        help="this partition only (default: every moved one)",
    )
    rebase.add_argument(
        "--offset", type=int, default=-1, help="the new watermark; -1: from the topic's start"
    )
    rebase.add_argument(
        "--dry-run", action="store_true", help="print what would happen, change nothing"
    )
    add_url(rebase)


def _json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON")


def _job(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--job", required=True, metavar="MODULE:ATTR", help="the Job whose handlers apply"
    )


def _parked_id(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--id", type=int, required=True, help="the record's id (the id column of inbox parked)"
    )
