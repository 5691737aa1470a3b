"""`outboxkit outbox cleanup|scheduled|release`: the outbox table's maintenance in retain mode, and
the scheduled messages: what waits, and a releaser for a deployment that runs none in its
services (or a one-off pass)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from outboxkit.commands import confirm
from outboxkit.kernel.wire import DEFAULT_MESSAGE_PREFIX
from outboxkit.parsers import SubParsers, add_url, command, group

if TYPE_CHECKING:
    from outboxkit.settings import Settings


def _cleanup(args: argparse.Namespace, settings: Settings) -> int:
    from datetime import timedelta

    from inbox import operations
    from outbox import cleanup
    from outboxkit.endpoints import resolve

    engine = resolve(settings).engine(args.url)
    older_than = timedelta(hours=args.older_than_hours)
    target = engine.url.render_as_string(hide_password=True)
    with engine.connect() as conn:
        due, total = cleanup.older_than(conn, older_than), cleanup.count(conn)
    plan = [
        f"outbox cleanup of {target}: {due} of the outbox's {total} rows are older than "
        f"{args.older_than_hours:g}h and would be deleted (in batches; Kafka keeps their events)"
    ]
    if not confirm.go_ahead(args, "outbox cleanup", plan):
        return 0
    deleted = cleanup.cleanup(engine, older_than=older_than)
    with engine.connect() as conn:
        left = cleanup.count(conn)
    operations.record_action(
        engine,
        who=confirm.operator(),
        command="outbox cleanup",
        target=target,
        detail={"older_than_hours": args.older_than_hours},
        count=deleted,
    )
    print(
        f"outbox cleanup: deleted {deleted} rows older than {args.older_than_hours:g}h from "
        f"{target}, {left} left"
    )
    return 0


def _hours(text: str) -> float:
    """A non-negative number of hours (argparse's type of --older-than-hours)."""
    try:
        hours = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of hours") from None
    if not hours >= 0 or hours == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of hours, 0 or more")
    return hours


def _scheduled(args: argparse.Namespace, settings: Settings) -> int:
    from outbox import scheduled
    from outboxkit.endpoints import resolve

    engine = resolve(settings).engine(args.url)
    now = scheduled.pending(engine)
    following = "none" if now["next_at"] is None else now["next_at"].isoformat()
    if args.json:
        print(json.dumps({**now, "next_at": None if now["next_at"] is None else following}))
        return 0
    print(
        f"scheduled messages: {now['pending']} pending, {now['due']} due (the oldest "
        f"{now['oldest_due_seconds']:.1f} s past its time), next at {following}"
    )
    return 0


def _release(args: argparse.Namespace, settings: Settings) -> int:
    import signal
    import threading

    # Stop signals are taken from the start: one arriving while the releaser starts ends it
    # cleanly too.
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda _signum, _frame: stopping.set())

    from outbox import scheduled
    from outbox.publish import Outbox
    from outbox.settings import ReleaseSettings
    from outboxkit.endpoints import resolve

    engine = resolve(settings).engine(args.url)
    outbox = Outbox(args.mode, message_prefix=args.message_prefix)
    if args.once:
        done = scheduled.release_due(engine, outbox.release_writer(), limit=args.batch)
        state = "another releaser holds the lock" if done.locked_out else f"{done.count} released"
        print(f"outbox release: {state}")
        return 0
    released = [0]

    def count(done: scheduled.Released) -> None:
        released[0] += done.count
        late = max(done.lags)
        print(f"released {done.count} (latest {late:.2f} s past due), {released[0]} in all")

    policy = ReleaseSettings(
        poll_seconds=args.poll_seconds, batch=args.batch, max_rate=args.max_rate
    )
    releaser = policy.releaser(engine, outbox, count)
    assert releaser is not None
    releaser.start()
    print(f"releasing scheduled messages into the outbox ({args.mode} mode); Ctrl-C stops")
    stopping.wait()
    releaser.stop()
    return 0


def add_parser(sub: SubParsers) -> None:
    actions = group(
        sub, "outbox", help="outbox maintenance (retain mode) and the scheduled messages"
    )
    cleanup = command(
        actions, "cleanup", _cleanup, help="delete the published rows older than an age"
    )
    cleanup.add_argument(
        "--older-than-hours", type=_hours, default=24.0, help="age of the rows to delete, in hours"
    )
    add_url(cleanup)
    confirm.add_options(cleanup)
    waiting = command(
        actions, "scheduled", _scheduled, help="how many scheduled messages wait, and how late"
    )
    add_url(waiting)
    waiting.add_argument("--json", action="store_true", help="print the counts as JSON")
    release = command(
        actions,
        "release",
        _release,
        help="release the scheduled messages as they come due (one releaser at a time does)",
    )
    release.add_argument("--once", action="store_true", help="one pass, then exit")
    # The defaults are outbox.scheduled's; named here, not imported, so --help stays quick.
    release.add_argument(
        "--mode",
        choices=("delete", "retain", "message"),
        default="delete",
        help="the outbox mode of the services",
    )
    release.add_argument(
        "--message-prefix",
        default=DEFAULT_MESSAGE_PREFIX,
        help="message mode: the logical decoding messages' prefix",
    )
    release.add_argument("--batch", type=int, default=500, help="messages per transaction")
    release.add_argument(
        "--max-rate",
        type=float,
        default=5000.0,
        help="messages per second at most (a backlog's pace)",
    )
    release.add_argument(
        "--poll-seconds", type=float, default=1.0, help="the longest sleep between passes"
    )
    add_url(release)
