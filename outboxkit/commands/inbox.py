"""`outboxkit inbox status|parked|show|skip|redrive|rewind|rebase|retry|actions`: a consumer's
inbox state, its parked records, what an operator does with them (`inbox_changes`: each names
its target, has --dry-run, asks before it rewinds) and the action log of what was done."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from outboxkit.commands.inbox_changes import (
    add_parsers,
    engine_of,
    job_inbox,
    job_option,
    parked_id,
    record_id,
)
from outboxkit.parsers import SubParsers, add_url, command, group

if TYPE_CHECKING:
    from outboxkit.settings import Settings


def _status(args: argparse.Namespace, settings: Settings) -> int:
    from inbox import operations

    rows = operations.status(engine_of(args, settings), args.consumer)
    return _print_rows("inbox status", rows, as_json=args.json)


def _parked(args: argparse.Namespace, settings: Settings) -> int:
    from inbox import operations

    rows = operations.list_parked(engine_of(args, settings), args.consumer, limit=args.limit)
    if not args.json:  # when each is retried, or that it waits for a person
        rows = [{**r, "retry_at": r["retry_at"] or "parked"} for r in rows]
    return _print_rows("inbox parked", rows, as_json=args.json)


def _actions(args: argparse.Namespace, settings: Settings) -> int:
    from inbox import operations

    engine = engine_of(args, settings)
    rows = operations.list_actions(engine, limit=args.limit, command=args.of_command)
    if not args.json:  # one column of JSON, not a Python dict
        rows = [{**r, "detail": json.dumps(r["detail"])} for r in rows]
    return _print_rows("inbox actions (newest first)", rows, as_json=args.json)


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
    return _inbox_show(
        engine_of(args, settings), record_id(args), as_json=args.json, full=args.full
    )


def _retry(args: argparse.Namespace, settings: Settings) -> int:
    """Redrive a job's parked records whose delayed retry is due: once, or every second until
    interrupted (beside, or instead of, the consumer driver's retrier)."""
    import time

    from inbox import retry_due

    inbox = job_inbox(args.job)
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
        help="inbox state: status, parked (list, show, skip), redrive, retry, rewind, rebase, "
        "the action log",
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
    parked_id(show)
    show.add_argument("--full", action="store_true", help="raw bytes whole (not cut at 2000)")
    _json(show)
    add_url(show)
    add_parsers(actions)
    retry = command(
        actions,
        "retry",
        _retry,
        help="redrive a job's parked records whose delayed retry is due, every second (the "
        "consumer driver does too)",
    )
    job_option(retry)
    retry.add_argument("--once", action="store_true", help="one pass, then exit")
    retry.add_argument("--every", type=float, default=1.0, help="seconds between passes")
    listed = command(
        actions,
        "actions",
        _actions,
        help="the operator action log, newest first: who did what, when, to what, how many",
    )
    listed.add_argument("--limit", type=int, default=100, help="rows to list at most")
    listed.add_argument(
        "--command",
        dest="of_command",  # not `command`: the top-level parser's
        metavar="COMMAND",
        help="only this command's rows, e.g. 'inbox rewind' or 'db downgrade'",
    )
    _json(listed)
    add_url(listed)


def _json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON")
