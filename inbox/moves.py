"""Partitions whose offsets moved (a re-created topic, another cluster), as the consumer driver
and operators see them: which ones, whether their sources' positions can take over, and
starting them over.

Starting a partition over sets its watermark to -1 for the topic's new identity and moves the
window's ids below every offset; the sources' positions stay and decide from then on. The
reader must then read the partition from its start (the driver moves its Spark checkpoint
aside and starts from the inbox's positions): `Inbox` never starts a partition over by itself,
since a slice read from the middle of the new topic would pass the records before it."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace

from sqlalchemy import ColumnElement, func, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from inbox import judgement, stops
from inbox.position import TopicIdentity, from_json, identity_of, key_for
from inbox.recorder import Recorder
from inbox.states import losts_to_json, states_from_row, states_to_json
from inbox.tables import ERROR_CHARS, recent_ids, watermarks
from outboxkit.kernel.wire.position import Position
from outboxkit.kernel.wire.record import readable


@dataclass(frozen=True)
class Move:
    """One partition of a consumer whose offsets no longer mean what its watermark says."""

    consumer: str
    topic: str
    partition: int
    watermark: int
    recorded: TopicIdentity | None  # what its offsets referred to
    current: TopicIdentity | None  # what the topic is now (None: not known)
    positions: Mapping[str, Position]
    stopped: str | None

    @property
    def identity_changed(self) -> bool:
        return None not in (self.recorded, self.current) and self.recorded != self.current

    @property
    def automatic(self) -> bool:
        """True when the driver may start it over: the topic's identity changed, the
        partition's sources have positions to judge its records by, and it is not stopped on
        something a start-over would hide (positions gone back, positions without identity:
        `inbox.transitions.refusal`)."""
        return self.identity_changed and bool(self.positions) and not any(stops.held(self.stopped))

    def describe(self) -> str:
        if self.stopped:
            return self.stopped
        assert self.recorded is not None and self.current is not None
        return f"{self.recorded.describe()} became {self.current.describe()}"


def moved(
    engine: Engine,
    consumer: str,
    current: Mapping[str, TopicIdentity],
    topics: Sequence[str] | None = None,
) -> list[Move]:
    """The consumer's partitions (of ``topics``, else all) that are stopped or whose recorded
    identity differs from ``current`` (per topic; a topic missing there is not judged)."""
    query = select(watermarks).where(watermarks.c.consumer == consumer)
    if topics is not None:
        query = query.where(watermarks.c.topic.in_(list(topics)))
    found = []
    with engine.connect() as conn:
        for row in conn.execute(query.order_by(watermarks.c.topic, watermarks.c.partition)):
            recorded = (
                TopicIdentity(row.cluster_id, row.topic_id)
                if row.cluster_id is not None and row.topic_id is not None
                else None
            )
            move = Move(
                consumer,
                row.topic,
                int(row.partition),
                int(row.offset),
                recorded,
                current.get(row.topic),
                from_json(row.sources),
                row.stopped,
            )
            if move.stopped is not None or move.identity_changed:
                found.append(move)
    return found


def recreated(recorded: TopicIdentity | None, current: TopicIdentity | None) -> bool:
    """True when ``current`` is the topic deleted and created again on the cluster of
    ``recorded`` (another topic id, the same cluster): it holds nothing of the old one, unlike
    a mirror on another cluster."""
    return (
        recorded is not None
        and current is not None
        and recorded.cluster_id == current.cluster_id
        and recorded.topic_id != current.topic_id
    )


def start_over(
    engine: Engine,
    move: Move,
    identity: TopicIdentity | None = None,
    offset: int = -1,
    *,
    by_operator: bool = False,
) -> None:
    """Start ``move``'s partition over for ``identity`` (its current one when None): watermark
    ``offset`` (-1: read from its start; an operator's "applied up to N"), the window's ids kept
    below every offset (`keep_ids_below_offsets`), no longer stopped; the positions stay (they
    decide from now on) and become the sources' floors (the re-read repeats them), and so do
    its parked records (their topic id tells their incarnation). Started over by the driver, a
    record no known source's position judges stops the partition; ``by_operator``: the
    operator vouched for the offsets above ``offset``, and such records are judged by offset.
    One transaction."""
    recorder = Recorder(move.consumer)
    where = recorder.match(watermarks, move.topic, move.partition)
    chosen = identity or move.current
    with Session(engine) as session, session.begin():
        locked = recorder.locked(session, move.topic, move.partition)
        again = recreated(locked.identity, chosen)
        states = judgement.started_over(locked.sources, recreated=again)
        _, _, floors = states_to_json(states)
        session.execute(
            update(watermarks)
            .where(*where)
            .values(
                offset=offset,
                cluster_id=None if chosen is None else chosen.cluster_id,
                topic_id=None if chosen is None else chosen.topic_id,
                stopped=None,
                by_position=bool(locked.sources) and not by_operator,
                floors=floors,
                lost_histories=losts_to_json(states),
                epoch=watermarks.c.epoch + 1,
                updated_at=func.now(),
            )
        )
        keep_ids_below_offsets(session, recorder.match(recent_ids, move.topic, move.partition))


def keep_ids_below_offsets(session: Session, scope: Sequence[ColumnElement[bool]]) -> None:
    """Move the window's slices (``scope``: one partition's) below every Kafka offset: their
    ids still say which events were applied (a re-send under another source name, a tie at the
    floor), but no offset of the new incarnation matches theirs (a replay's check, a new
    slice's row) and they leave the window as the new watermark moves on. The shift is larger
    than their span, so no shifted row takes another's key during the update."""
    span = session.execute(
        select(func.min(recent_ids.c.first_offset), func.max(recent_ids.c.last_offset)).where(
            *scope
        )
    ).one()
    if span[0] is None:
        return
    low, high = int(span[0]), int(span[1])
    shift = max(high + 2, high - low + 1)
    session.execute(
        update(recent_ids)
        .where(*scope)
        .values(
            first_offset=recent_ids.c.first_offset - shift,
            last_offset=recent_ids.c.last_offset - shift,
            # in the same order: offsets and event_ids are parallel arrays
            offsets=text(
                "ARRAY(SELECT o - :p_shift FROM unnest(inbox_recent.offsets) WITH ORDINALITY "
                "AS t(o, n) ORDER BY n)"
            ).bindparams(p_shift=shift),
        )
    )


def stop(session: Session, consumer: str, topic: str, partition: int, reason: str) -> None:
    """Record why the partition stopped (`outboxkit inbox status`); the caller holds its lock."""
    session.execute(
        update(watermarks)
        .where(*Recorder(consumer).match(watermarks, topic, partition))
        .values(stopped=readable(reason, ERROR_CHARS))
    )


Row = tuple[Mapping[str, judgement.SourceState], Mapping[str, str]]  # states, identities


def raised_rows(
    rows: Sequence[Row], names: Collection[str], databases: Collection[str], added: int
) -> list[Row]:
    """Every partition's states and source identities once the paused sources are raised
    before ``added`` partitions are added (the last ``added`` rows of the result are theirs):
    the databases of identity in ``databases``, or, when none is given, every database under
    a name in ``names`` (a database still publishing under the same name must not be raised: a
    lagging partition may hold its events below another's top). Each database is raised by its
    own positions in every partition, whatever key a partition keeps it under (a key names one
    database in one partition and maybe another in the next: two databases under one name,
    seen in another order); a partition that never saw it gets a key of its own for it, with its
    identity. Positions stored without identity under a name in ``names`` are raised apart,
    under the name, and only where the name is not a database's key (a database claims them
    later as `source_keys` says; `inbox.judgement.claimed_below` stops a claim at or below
    them)."""
    groups: list[dict[str, judgement.SourceState]] = []
    labels: dict[str, str] = {}  # per group, its source name
    for states, identities in rows:
        grouped = {}
        for key, state in states.items():
            name, known = key.split("@", 1)[0], identity_of(key, identities)
            paused = name in names if known is None or not databases else known in databases
            if paused:
                group = known if known is not None else f"@{key}"
                grouped[group], labels[group] = state, name
        groups.append(grouped)
    best = judgement.shared_ties(judgement.raised(groups, labels), labels)
    out: list[Row] = []
    for states, identities in [*rows, *[({}, {})] * added]:
        states, identities = dict(states), dict(identities)
        for group, state in best.items():
            if group.startswith("@"):  # a source known by its name only
                key = group[1:]
                if key in identities:  # here the name is a database's: not the same source
                    continue
            else:
                kept = [k for k in {*states, *identities} if identity_of(k, identities) == group]
                key = kept[0] if kept else key_for(labels[group], group, {**states, **identities})
                identities[key] = group
            had = states.get(key)  # a lost history stays the partition's own
            states[key] = replace(state, lost=had.lost if had else None).settled()
        out.append((states, identities))
    return out


def raise_floors(
    engine: Engine,
    consumer: str,
    topic: str,
    partitions: int,
    sources: Collection[str],
    databases: Collection[str] = (),
) -> dict[str, Position]:
    """Before ``topic`` gets ``partitions`` partitions, with the connectors publishing as
    ``sources`` (names; ``databases``: their databases' identities, when known) paused and
    ``consumer`` caught up:
    every partition's state of each of those databases raised as `raised_rows` says (the
    highest top any partition decided, the ids decided at it, that top as its floor), and the
    new partitions' rows made with them (offsets from -1, the topic's identity). Everything
    those sources wrote before was decided, and everything they write after has a higher
    position, so a re-send landing in a partition that never saw its original is known for
    one. The other sources stay as they are: their connectors kept publishing, and a partition
    may still hold their events below another partition's top. Returns the floor per source
    key raised (in the existing partitions)."""
    keys = (watermarks.c.consumer == consumer, watermarks.c.topic == topic)
    with Session(engine) as session, session.begin():
        rows = session.execute(
            select(watermarks).where(*keys).order_by(watermarks.c.partition).with_for_update()
        ).all()
        present = [int(row.partition) for row in rows]
        missing = [p for p in range(partitions) if p not in present]
        before = [(states_from_row(row), dict(row.source_identities or {})) for row in rows]
        after = raised_rows(before, sources, databases, len(missing))
        floors = {
            key: state.top
            for (old, _), (new, _) in zip(before, after, strict=False)
            for key, state in new.items()
            if old.get(key) != state
        }
        for row, (states, identities) in zip(rows, after, strict=False):
            tops, ids, floored = states_to_json(states)
            session.execute(
                update(watermarks)
                .where(*keys, watermarks.c.partition == row.partition)
                .values(
                    sources=tops,
                    tops=ids,
                    floors=floored,
                    source_identities=identities,
                    lost_histories=losts_to_json(states),
                )
            )
        if rows and missing:
            session.execute(
                pg_insert(watermarks)
                .values(
                    [
                        {
                            "consumer": consumer,
                            "topic": topic,
                            "partition": p,
                            "offset": -1,
                            "cluster_id": rows[0].cluster_id,
                            "topic_id": rows[0].topic_id,
                            **dict(
                                zip(
                                    ("sources", "tops", "floors"),
                                    states_to_json(states),
                                    strict=True,
                                )
                            ),
                            "source_identities": identities,
                        }
                        for p, (states, identities) in zip(missing, after[len(rows) :], strict=True)
                    ]
                )
                .on_conflict_do_nothing()
            )
    return floors


def epochs(engine: Engine, consumer: str, topics: Sequence[str]) -> dict[tuple[str, int], int]:
    """Each partition's start-over count, as a consumer query records it when it starts."""
    query = select(watermarks.c.topic, watermarks.c.partition, watermarks.c.epoch).where(
        watermarks.c.consumer == consumer, watermarks.c.topic.in_(list(topics))
    )
    with engine.connect() as conn:
        return {(t, int(p)): int(e) for t, p, e in conn.execute(query).all()}
