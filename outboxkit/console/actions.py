"""What an operator does from the console: retry a parked record now, redrive a failure group,
skip a record with a reason, edit a record's payload and retry it (the original kept in the
action log), rewind or rebase a partition. The same library calls as the CLI's commands, each
appended to the operator action log with who asked, and each made once per request: a request
sent twice (a double click, a retried POST) finds the first one's log row and acts no more."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import insert, select, text, update
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from inbox import operations
from inbox.recorder import Recorder
from inbox.tables import operator_actions, parked
from outboxkit.console import reads
from outboxkit.console.kafka_gate import KafkaGate, KafkaUnanswered
from outboxkit.kernel.wire.record import key_text

# Parked keys a group's redrive goes through per request; a larger group takes several.
REDRIVE_KEYS = 500


class ActionRefused(ValueError):
    """An action the console will not do as asked: the message says why and what to do."""


@dataclass(frozen=True)
class Done:
    """What an action did, as the page tells it; ``again``: the request was made before."""

    message: str
    again: bool = False


@dataclass(frozen=True)
class Logged:
    """An action's log row: command, target, detail and how many things it touched."""

    command: str
    target: str
    detail: Mapping[str, Any]
    count: int
    message: str


class Operator:
    """The console's actions on the consumers of ``inboxes`` (consumer -> its job's inbox)."""

    def __init__(self, inboxes: Mapping[str, Any], kafka: Mapping[str, dict[str, str]]) -> None:
        self.inboxes = dict(inboxes)
        self.kafka = dict(kafka)  # consumer -> its job's Kafka client settings
        self.gate = KafkaGate()  # the console's reads of Kafka on request, the pages' too

    def inbox(self, consumer: str) -> Any:
        """The inbox of ``consumer``; refused for a consumer the console does not watch."""
        if consumer not in self.inboxes:
            raise ActionRefused(f"the console watches no job of consumer {consumer!r}")
        return self.inboxes[consumer]

    def once(self, consumer: str, who: str, request: str, act: Callable[[], Logged]) -> Done:
        """Run ``act`` unless ``request`` was made before, then log it with ``who`` and the
        request. Requests of one token take turns (a session advisory lock), so a double click's
        second POST waits for the first and finds its log row."""
        if not request or len(request) > 64:
            raise ActionRefused("the form has no request token: reload the page and try again")
        engine: Engine = self.inbox(consumer).engine
        lock = text("SELECT pg_advisory_lock(hashtextextended(:k, 0))")
        unlock = text("SELECT pg_advisory_unlock(hashtextextended(:k, 0))")
        key = {"k": f"outboxkit-console:{request}"}
        with engine.connect() as conn:
            conn.execute(lock, key)
            conn.commit()
            try:
                done = reads.action_done(conn, request)
                conn.commit()
                if done is not None:
                    return Done(f"already done: {done['command']} {done['target']}", again=True)
                logged = act()
                operations.record_action(
                    engine,
                    who=who,
                    command=logged.command,
                    target=logged.target,
                    detail={**logged.detail, "request": request},
                    count=logged.count,
                )
                return Done(logged.message)
            finally:
                conn.execute(unlock, key)
                conn.commit()

    def retry(self, consumer: str, record_id: int) -> Logged:
        """Redrive the key of one parked record now (its records in offset order)."""
        inbox = self.inbox(consumer)
        found = operations.show(inbox.engine, record_id)
        if found is None or found["state"] != "parked" or found["consumer"] != consumer:
            raise ActionRefused(f"no parked record {record_id} of consumer {consumer}")
        topic, partition, key = found["topic"], found["partition"], key_text(found["raw_key"])
        result = operations.redrive(inbox, topic, partition, key=key)
        return _redriven(f"{consumer} {topic}[{partition}]", result, {"id": record_id, "key": key})

    def redrive_group(self, consumer: str, cause: str, filters: reads.Filters) -> Logged:
        """Redrive every key a failure group's records are parked under (up to REDRIVE_KEYS
        keys a request), each in offset order."""
        inbox = self.inbox(consumer)
        with inbox.engine.connect() as conn:
            targets = reads.group_targets(conn, consumer, cause, filters, REDRIVE_KEYS)
        if not targets:
            raise ActionRefused("no parked record has this cause any more: nothing to redrive")
        total = operations.RedriveResult(0, 0, 0)
        for topic, partition, raw_key in targets:
            total += operations.redrive(inbox, topic, partition, key=key_text(raw_key))
        detail = {"cause": cause, "keys": len(targets)}
        return _redriven(f"{consumer} group", total, detail, command="console redrive group")

    def skip(self, consumer: str, record_id: int, who: str, reason: str) -> Logged:
        """Give up on one parked record, with who and why (kept in inbox_skipped)."""
        if not reason.strip():
            raise ActionRefused("say why the record is skipped: the reason is kept with it")
        inbox = self.inbox(consumer)
        found = operations.show(inbox.engine, record_id)
        if found is None or found["consumer"] != consumer:
            raise ActionRefused(f"no parked record {record_id} of consumer {consumer}")
        if found["state"] != "parked":
            raise ActionRefused(f"record {record_id} is {found['state']} already")
        row = operations.skip(inbox.engine, record_id, by=who, reason=reason)
        target = f"{consumer} {row['topic']}[{row['partition']}]"
        detail = {"id": record_id, "offset": row["offset"], "event_id": row["event_id"]}
        return Logged(
            "console skip",
            target,
            {**detail, "reason": reason},
            1,
            f"skipped record {record_id}; records of its key parked behind it stay parked "
            "until the key is redriven",
        )

    def edit(self, consumer: str, record_id: int, payload: str, who: str, request: str) -> Logged:
        """Replace a parked record's payload (JSON) and redrive its key. The original payload
        goes into the action log in the edit's own transaction, so it is never lost."""
        try:
            edited = json.dumps(json.loads(payload), separators=(",", ":")).encode()
        except ValueError as exc:
            raise ActionRefused(f"the payload is not JSON: {exc}") from exc
        inbox = self.inbox(consumer)
        with Session(inbox.engine) as session, session.begin():
            where = parked.c.id == record_id
            row = session.execute(select(parked).where(where)).one_or_none()
            if row is None or row.consumer != consumer:
                raise ActionRefused(f"no parked record {record_id} of consumer {consumer}")
            Recorder(consumer).lock(session, row.topic, row.partition)
            row = session.execute(select(parked).where(where)).one_or_none()  # redrive may be first
            if row is None:
                raise ActionRefused(f"record {record_id} is no longer parked")
            original = row.payload
            session.execute(update(parked).where(parked.c.id == record_id).values(payload=edited))
            target = f"{consumer} {row.topic}[{row.partition}]"
            detail = {
                "id": record_id,
                "event_id": row.event_id,
                "original": _b64(original),
                "original_sha256": hashlib.sha256(original or b"").hexdigest(),
                "edited": _b64(edited),
                "request": f"{request}:edit",
            }
            session.execute(
                insert(operator_actions).values(
                    who=who[:255], command="console edit", target=target, detail=detail, count=1
                )
            )
        return self.retry(consumer, record_id)

    def rewind(self, consumer: str, topic: str, partition: int, offset: int) -> Logged:
        """Move a partition's watermark back to ``offset`` (from -1 to its watermark)."""
        engine = self.inbox(consumer).engine
        plan = self.rewind_plan(consumer, topic, partition, offset)
        try:
            previous = operations.rewind(engine, consumer, topic, partition, offset)
        except operations.Refused as exc:  # the watermark moved since the plan
            raise ActionRefused(str(exc)) from exc
        detail = {"from": previous, "to": offset, "forgotten_ids": plan.forgotten}
        return Logged(
            "console rewind",
            f"{consumer} {topic}[{partition}]",
            detail,
            max(previous - offset, 0),
            f"rewound {consumer} {topic}[{partition}]: {previous} -> {offset}",
        )

    def rewind_plan(
        self, consumer: str, topic: str, partition: int, offset: int
    ) -> operations.RewindPlan:
        """What a rewind would do; refused when ``offset`` is not a rewind."""
        try:
            plan = operations.rewind_plan(
                self.inbox(consumer).engine, consumer, topic, partition, offset
            )
        except operations.Refused as exc:
            raise ActionRefused(str(exc)) from exc
        return plan

    def rebase_plan(self, consumer: str, topic: str) -> tuple[Any, list[Any]]:
        """The topic's identity now and the partitions a rebase would start over."""
        from outboxkit.commands.inbox_changes import moved_partitions

        kafka = self.kafka[consumer]
        engine = self.inbox(consumer).engine
        try:
            return self.gate.read(
                kafka.get("bootstrap.servers", ""),
                lambda: moved_partitions(engine, consumer, topic, kafka),
            )
        except ValueError as exc:
            raise ActionRefused(str(exc)) from exc
        except KafkaUnanswered as exc:
            raise ActionRefused(
                f"{exc}: a rebase needs the topic's identity there; retry once Kafka is back"
            ) from exc

    def rebase(
        self,
        consumer: str,
        topic: str,
        reading: str = "start-over",
        value: str = "",
        partition: int | None = None,
    ) -> Logged:
        """Resume the partitions of ``topic`` whose offsets moved, as ``reading`` says (the
        CLI's `inbox rebase` options, `resume_reading`): start them over from the topic's start
        (judged by their sources' positions where the records carry them), or resume the
        stopped ``partition`` at its watermark: as re-sends, with a restored database's new
        history (``value``: the LSN), or with the database that wrote positions stored without
        identity (``value``: its identity). Refused as the CLI refuses it
        (`inbox.transitions.refusal`)."""
        from inbox import stops, transitions

        current, found = self.rebase_plan(consumer, topic)
        if reading != "start-over":
            found = [m for m in found if m.partition == partition]
        if not found:
            raise ActionRefused(f"no partition of {topic} is stopped or of another topic id")
        how = resume_reading(reading, stops.stopped_source(found[0].stopped or ""), value)
        engine = self.inbox(consumer).engine
        try:
            transitions.rebase(engine, found, current, how)
        except transitions.Refused as exc:
            raise ActionRefused(str(exc)) from exc
        partitions = [m.partition for m in found]
        described = how.describe(found[0])
        return Logged(
            "console rebase",
            f"{consumer} {topic}",
            {
                "partitions": partitions,
                "offset": how.offset,
                "topic": current.describe(),
                "as_resends": how.resends,
                "new_history": dict(how.histories),
                "source_identity": dict(how.claims),
            },
            len(found),
            f"{consumer} {topic} {partitions}: {described}; restart the consumer job",
        )


def resume_reading(reading: str, source: str | None, value: str) -> Any:
    """The `inbox.transitions.Rebase` of a console rebase form: ``reading`` is ``start-over``,
    ``as-resends``, ``new-history`` (``value``: the LSN where ``source``'s new history began)
    or ``source-identity`` (``value``: the identity of the database that wrote ``source``'s
    positions); ``source`` is the one the stop names."""
    from inbox import transitions

    if reading == "start-over":
        return transitions.Rebase(offset=-1)
    if reading == "as-resends":
        return transitions.Rebase(resends=True)
    if reading not in ("new-history", "source-identity"):
        raise ActionRefused(f"unknown way to resume: {reading!r}")
    if source is None:
        raise ActionRefused("the partition's stop names no source: only a start-over resumes it")
    value = value.strip()
    if reading == "source-identity":
        if not value:
            raise ActionRefused("name the database that wrote the positions (like 7316/orders)")
        return transitions.Rebase(claims={source: value})
    try:
        return transitions.Rebase(histories={source: transitions.parse_lsn(value)})
    except ValueError as exc:
        raise ActionRefused(str(exc)) from exc


def _redriven(
    target: str,
    result: operations.RedriveResult,
    detail: Mapping[str, Any],
    command: str = "console retry",
) -> Logged:
    counts = {
        "applied": result.applied,
        "already_applied": result.skipped,
        "still_parked": result.still_parked,
    }
    message = (
        f"{result.applied} applied, {result.skipped} already applied, "
        f"{result.still_parked} still parked"
    )
    return Logged(command, target, {**detail, **counts}, sum(counts.values()), message)


def _b64(value: bytes | None) -> str | None:
    return None if value is None else base64.b64encode(bytes(value)).decode()
