"""`outboxkit inbox skip|redrive|rewind|rebase`: what an operator does to a consumer's
inbox. Each names its target (a parked record's id, or consumer, topic and partition), has a
``--dry-run`` that prints what it would do and to how many records or offsets, asks before it
rewinds (``--yes`` for scripts), and appends what it did to the operator action log
(`outboxkit inbox actions`)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from outboxkit.commands import confirm
from outboxkit.parsers import SubParsers, add_url, command

if TYPE_CHECKING:
    from outboxkit.settings import Settings


def engine_of(args: argparse.Namespace, settings: Settings) -> Any:
    """An engine on the database of --url, the settings or the local stack."""
    from outboxkit.endpoints import resolve

    return resolve(settings).engine(args.url)


def _record(
    engine: Any, command: str, target: str, detail: Mapping[str, Any], count: int, who: str = ""
) -> None:
    from inbox import operations

    operations.record_action(
        engine,
        who=who or confirm.operator(),
        command=command,
        target=target,
        detail=detail,
        count=count,
    )


def _database(engine: Any) -> str:
    return str(engine.url.render_as_string(hide_password=True))


def _skip(args: argparse.Namespace, settings: Settings) -> int:
    """Give up on one parked record (kept whole in inbox_skipped), or print what would be."""
    from inbox import operations

    engine = engine_of(args, settings)
    record = record_id(args)
    if args.dry_run:
        found = operations.show(engine, record)
        if found is None or found["state"] != "parked":
            raise LookupError(f"no parked record with id {record}")
        print(f"would skip {_parked_text(found)}: {found['error']}")
        print("dry run: nothing changed")
        return 0
    by = args.by or confirm.operator()
    row = operations.skip(engine, record, by=by, reason=args.reason)
    print(
        f"skipped {_parked_text(row)}; records of its key parked behind it stay parked until "
        "the key is redriven"
    )
    detail = {k: row[k] for k in ("id", "offset", "key", "event_id", "event_type")}
    target = f"{row['consumer']} {row['topic']}[{row['partition']}]"
    _record(engine, "inbox skip", target, {**detail, "reason": args.reason}, 1, who=by)
    return 0


def _parked_text(row: Mapping[str, Any]) -> str:
    return (
        f"parked record {row['id']}: {row['consumer']} {row['topic']}[{row['partition']}] "
        f"offset {row['offset']} (key {row['key']!r})"
    )


def _rewind(args: argparse.Namespace, settings: Settings) -> int:
    """Move a partition's watermark back to --offset, once its plan is confirmed."""
    from inbox import operations
    from outboxkit.commands.errors import CommandError

    engine = engine_of(args, settings)
    where = (args.consumer, args.topic, args.partition)
    target = f"{args.consumer} {args.topic}[{args.partition}]"
    try:
        plan = operations.rewind_plan(engine, *where, args.offset)
    except operations.Refused as exc:
        raise CommandError(str(exc)) from exc
    if not confirm.go_ahead(args, "inbox rewind", _rewind_plan(target, engine, plan)):
        return 0
    try:
        previous = operations.rewind(engine, *where, args.offset)
    except operations.Refused as exc:  # the watermark moved since the plan
        raise CommandError(str(exc)) from exc
    print(f"rewound {target}: {previous} -> {args.offset}")
    print(
        "a consumer job reading it now restarts its query from the inbox's watermarks at its "
        "next batch of the partition (one stopped reads from them when it starts)"
    )
    detail = {"from": previous, "to": args.offset, "forgotten_ids": plan.forgotten}
    _record(engine, "inbox rewind", target, detail, max(previous - args.offset, 0))
    return 0


def _rewind_plan(target: str, engine: Any, plan: Any) -> list[str]:
    """The plan of a rewind (`inbox.operations.RewindPlan`)."""
    return [
        f"inbox rewind of {target} on {_database(engine)}",
        f"  watermark {plan.watermark} -> {plan.offset}: {plan.replayed} offset(s), "
        f"{plan.offset + 1} to {plan.watermark}, read and applied again (handlers run again)",
        f"  applied again: the {plan.forgotten} event(s) the window holds above {plan.offset}; "
        "other records there are judged as usual (re-sends stay skipped)",
    ]


def _rebase(args: argparse.Namespace, settings: Settings) -> int:
    from outboxkit.endpoints import resolve

    return _inbox_rebase(args, engine_of(args, settings), resolve(settings).kafka())


def _inbox_rebase(args: argparse.Namespace, engine: Any, kafka: dict[str, str]) -> int:
    """Start over the partitions of a consumer's topic whose offsets moved (stopped, or of
    another topic identity than the topic's today): watermark at ``--offset`` (-1: read the
    topic from its start; the sources' positions, where the records carry them, decide what
    was applied), once the plan is confirmed."""
    from inbox import transitions
    from outboxkit.commands.errors import CommandError

    current, found = moved_partitions(
        engine, args.consumer, args.topic, kafka, only=args.partition_given
    )
    if not found:
        print(f"{args.consumer} {args.topic}: no partition is stopped or of another topic id")
        return 0
    how = rebase_of(args)
    refused = [why for why in (transitions.refusal(m, how) for m in found) if why is not None]
    if refused:
        raise CommandError("; ".join(refused))
    if not confirm.go_ahead(args, "inbox rebase", _rebase_plan(args, engine, current, found)):
        return 0
    transitions.rebase(engine, found, current, how)
    partitions = [m.partition for m in found]
    print(f"{args.consumer} {args.topic} {partitions}: {how.describe(found[0])}")
    print("restart the consumer job: it reads these partitions from the inbox's positions")
    detail = {
        "partitions": partitions,
        "offset": args.offset,
        "topic": current.describe(),
        "as_resends": how.resends,
        "new_history": dict(how.histories),
        "source_identity": dict(how.claims),
    }
    _record(engine, "inbox rebase", f"{args.consumer} {args.topic}", detail, len(found))
    return 0


def rebase_of(args: argparse.Namespace) -> Any:
    """The `inbox.transitions.Rebase` the options ask for."""
    from inbox import transitions
    from outboxkit.commands.errors import CommandError

    histories: dict[str, int] = {}
    for item in args.new_history or ():
        source, sep, lsn = item.rpartition("=")
        if not sep or not source:
            raise CommandError(f"--new-history {item!r}: expected SOURCE=LSN (like db=16/B374D848)")
        try:
            histories[source] = transitions.parse_lsn(lsn)
        except ValueError as exc:
            raise CommandError(f"--new-history {item!r}: {exc}") from exc
    if histories and args.as_resends:
        raise CommandError(
            "--as-resends and --new-history are two readings of one stop: choose one"
        )
    claims: dict[str, str] = {}
    for item in args.source_identity or ():
        source, sep, identity = item.partition("=")
        if not sep or not source or not identity:
            raise CommandError(
                f"--source-identity {item!r}: expected SOURCE=IDENTITY (like orders-db=7316/orders)"
            )
        claims[source] = identity
    return transitions.Rebase(args.offset, bool(args.as_resends), histories, claims)


def moved_partitions(
    engine: Any, consumer: str, topic: str, kafka: dict[str, str], only: int | None = None
) -> tuple[Any, list[Any]]:
    """The topic's identity on Kafka now, and the partitions of ``consumer`` on it (``only``
    that one, when given) that are stopped or of another topic identity: what a rebase
    starts over."""
    from inbox import moves
    from spark_consumers.identity import TopicIdentities

    current = TopicIdentities(kafka).read([topic]).get(topic)
    if current is None:
        raise ValueError(f"topic {topic} does not exist on {kafka['bootstrap.servers']}")
    found = [
        m
        for m in moves.moved(engine, consumer, {topic: current}, [topic])
        if only is None or m.partition == only
    ]
    return current, found


def _rebase_plan(
    args: argparse.Namespace, engine: Any, current: Any, found: list[Any]
) -> list[str]:
    lines = [f"inbox rebase of {args.consumer} {args.topic} on {_database(engine)}"]
    for move in found:
        judged = (
            f"by their sources' positions where they carry one, else by offset above {args.offset}"
            if move.positions
            else "by offset only"
        )
        how = rebase_of(args)
        if how.resumes:
            lines.append(f"  [{move.partition}]: {how.describe(move)} (was: {move.describe()})")
            continue
        lines.append(
            f"  start [{move.partition}] over: watermark {move.watermark} -> {args.offset} for "
            f"{current.describe()} (was: {move.describe()}); its records judged {judged}"
        )
    return lines


def _redrive(args: argparse.Namespace, settings: Settings) -> int:
    """Apply a key's parked records again with the job's handlers; exit 1 if some stay parked."""
    from inbox import operations

    _check_redrive_target(args)
    inbox = job_inbox(args.job)
    topic, partition, key = _redrive_target(args, inbox)
    target = f"{inbox.consumer} {topic}[{partition}]"
    if args.dry_run:
        return _redrive_plan(inbox, target, topic, partition, key)
    result = operations.redrive(inbox, topic, partition, key=key)
    print(
        f"redrive: {result.applied} applied, {result.skipped} already applied, "
        f"{result.still_parked} still parked"
    )
    counts = (result.applied, result.skipped, result.still_parked)
    detail = dict(zip(("applied", "already_applied", "still_parked"), counts, strict=True))
    _record(
        inbox.engine, "inbox redrive", target, {**detail, "key": key, "id": args.id}, sum(counts)
    )
    return 0 if result.still_parked == 0 else 1


def _check_redrive_target(args: argparse.Namespace) -> None:
    from outboxkit.commands.errors import CommandError

    if args.id is None and (args.topic is None or args.partition is None):
        raise CommandError("redrive needs its target: --topic and --partition, or --id")
    if args.id is not None and (args.topic, args.partition, args.key) != (None, None, None):
        raise CommandError("--id names the partition and key to redrive: leave out the others")


def _redrive_target(args: argparse.Namespace, inbox: Any) -> tuple[str, int, str | None]:
    """The topic, partition and key (None: every key) that --id or the options name."""
    if args.id is None:
        return args.topic, args.partition, args.key
    from inbox import operations
    from outboxkit.kernel.wire.record import key_text

    found = operations.show(inbox.engine, int(args.id))  # its partition and exact key
    if found is None or found["state"] != "parked" or found["consumer"] != inbox.consumer:
        raise ValueError(f"no parked record {args.id} of consumer {inbox.consumer}")
    return found["topic"], found["partition"], key_text(found["raw_key"])


def _redrive_plan(inbox: Any, target: str, topic: str, partition: int, key: str | None) -> int:
    """--dry-run: the parked records a redrive would apply again, in its order."""
    from inbox.redrives import to_redrive

    rows = to_redrive(inbox, topic, partition, key)
    keys = {row.raw_key for row in rows}
    print(
        f"would redrive {len(rows)} parked record(s) of {len(keys)} key(s) of {target}, in this "
        "order (the first of a key that fails again holds the rest):"
    )
    for row in rows:
        waits = f"retry at {row.retry_at}" if row.retry_at else "parked"
        print(f"  id {row.id} offset {row.offset} key {row.key!r} {row.event_type} ({waits})")
    print("dry run: nothing changed")
    return 0


def job_inbox(spec: str) -> Any:
    """The inbox of the job ``spec`` names, on its database, for an operator command."""
    from outboxkit.commands.errors import load_job

    job = load_job(spec)
    return job.inbox(job.engine("once"))


def add_parsers(actions: SubParsers) -> None:
    """The sub-commands that change an inbox by hand: skip, redrive, rewind, rebase."""
    skip = command(actions, "skip", _skip, help="give up on one parked record, on the record")
    parked_id(skip)
    skip.add_argument("--reason", required=True, help="why (recorded with the skipped record)")
    skip.add_argument(
        "--by", help=f"who (recorded; default: {confirm.OPERATOR_VARIABLE}, else the OS user)"
    )
    confirm.add_options(skip, ask=False)
    add_url(skip)
    redrive = command(
        actions,
        "redrive",
        _redrive,
        help="apply a key's parked records again, with a job's (fixed) handlers; exits 1 when "
        "some stay parked",
    )
    job_option(redrive)
    redrive.add_argument("--id", type=int, help="a parked record: redrive its key exactly")
    redrive.add_argument("--topic", help="the topic (without --id)")
    redrive.add_argument("--partition", type=int, help="the partition (with --topic, no default)")
    redrive.add_argument("--key", help="only this key (default: every parked key of the partition)")
    confirm.add_options(redrive, ask=False)
    _add_rewind(actions)
    _add_rebase(actions)


def _add_rewind(actions: SubParsers) -> None:
    rewind = command(
        actions,
        "rewind",
        _rewind,
        help="move a partition's watermark back: the records above it are applied again; "
        "prints the plan and asks first",
    )
    rewind.add_argument("--consumer", required=True, help="the inbox consumer")
    rewind.add_argument("--topic", required=True, help="the topic")
    rewind.add_argument("--partition", type=int, required=True, help="the partition")
    rewind.add_argument(
        "--offset", type=int, required=True, help="the new watermark, at most the current one"
    )
    confirm.add_options(rewind)
    add_url(rewind)


def _add_rebase(actions: SubParsers) -> None:
    rebase = command(
        actions,
        "rebase",
        _rebase,
        help="start over the partitions whose offsets moved (a re-created topic, another "
        "cluster); prints the plan and asks first",
    )
    rebase.add_argument("--consumer", required=True, help="the inbox consumer")
    rebase.add_argument("--topic", required=True, help="the topic")
    rebase.add_argument(
        "--only-partition",
        dest="partition_given",
        type=int,
        help="this partition only (default: every moved one, each listed in the plan)",
    )
    rebase.add_argument(
        "--offset", type=int, default=-1, help="the new watermark; -1: from the topic's start"
    )
    rebase.add_argument(
        "--as-resends",
        action="store_true",
        help="a partition stopped on positions gone back holds re-sends the window forgot: "
        "each source's top becomes its floor, the watermark stays",
    )
    rebase.add_argument(
        "--new-history",
        action="append",
        metavar="SOURCE=LSN",
        help="a partition stopped on positions gone back: SOURCE's database was restored or "
        "failed over, its new timeline beginning at LSN; what it wrote up to there is skipped, "
        "what it wrote after is applied (repeatable)",
    )
    rebase.add_argument(
        "--source-identity",
        action="append",
        metavar="SOURCE=IDENTITY",
        help="a partition stopped on positions without identity: SOURCE's positions, stored "
        "before its records carried one, were written by the database IDENTITY (repeatable)",
    )
    confirm.add_options(rebase)
    add_url(rebase)


def parked_id(parser: argparse.ArgumentParser) -> None:
    """The id of a parked (or skipped) record: positional, as git or kubectl take a name, or
    --id (scripts written before); `record_id` reads it."""
    parser.add_argument(
        "id",
        nargs="?",
        type=_id_or_absent,
        metavar="ID",
        default=argparse.SUPPRESS,  # absent: --id's value stays
        help="the record's id (the id column of inbox parked)",
    )
    parser.add_argument("--id", dest="id", type=int, help="the same id, as an option")


def _id_or_absent(value: str) -> Any:
    # argparse converts an absent optional positional's default too: keep SUPPRESS as it is.
    if value == argparse.SUPPRESS:
        return value
    if not value.isdigit():
        raise argparse.ArgumentTypeError(f"{value!r} is not a record id (a whole number)")
    return int(value)


def record_id(args: argparse.Namespace) -> int:
    """The record id a command was given (`parked_id`); a usage error without one."""
    if args.id is None:
        from outboxkit.commands.errors import USAGE, CommandError

        raise CommandError("name the record: its ID (the id column of `inbox parked`)", USAGE)
    return int(args.id)


def job_option(parser: argparse.ArgumentParser) -> None:
    """The --job whose handlers apply (and whose database and consumer are the target)."""
    parser.add_argument(
        "--job", required=True, metavar="MODULE:ATTR", help="the Job whose handlers apply"
    )
