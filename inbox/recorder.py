"""The inbox's bookkeeping SQL, in one place: watermarks, the window of recent event ids, and
parked records of one consumer, as the apply loop, redrive and the consumer runner use them
(reading and moving every consumer's rows, for operators and metrics: `inbox.operations`)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, insert, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import Session

from inbox import statements
from inbox.decision import PartitionView, asks_window, prune_floor
from inbox.judgement import SourceState
from inbox.parked_rows import Executor, ParkedRows
from inbox.position import TopicIdentity
from inbox.states import states_from_row, states_to_json
from inbox.tables import ledger, recent_ids, watermarks
from outboxkit.kernel.wire.position import Position
from outboxkit.kernel.wire.record import CANONICAL_UUID, Decoded


@dataclass(frozen=True)
class Locked:
    """A partition's watermark as `Recorder.locked` reads it under the row lock."""

    offset: int  # -1 before the first record
    any_parked: bool  # False: the partition has no parked record (`Recorder.parked_keys`)
    identity: TopicIdentity | None = None  # what the offsets refer to (None: not recorded yet)
    sources: Mapping[str, SourceState] = field(default_factory=dict)  # `inbox.judgement`
    stopped: str | None = None  # why the partition is stopped (`inbox.moves.stop`)
    by_position: bool = False  # started over: only records with a known source's position
    epoch: int = 0  # start-overs so far
    identities: Mapping[str, str] = field(default_factory=dict)  # per name, its first database
    replay_ids: frozenset[str] = frozenset()  # what an operator's rewind applies again

    @property
    def positions(self) -> dict[str, Position]:
        """Per source, the highest position decided."""
        return {key: state.top for key, state in self.sources.items()}


@dataclass(frozen=True)
class Recorder(ParkedRows):
    """One consumer's inbox rows (its parked records: `inbox.parked_rows`). ``window``: offsets
    per partition over which applied event ids are kept against re-sends (0: none, the
    watermark alone). ``ledger``: every applied event is also appended to the ledger
    (`inbox.tables.ledger`)."""

    window: int = 0
    ledger: bool = False

    # -- watermark ---------------------------------------------------------------------------
    def lock(self, session: Session, topic: str, partition: int) -> int:
        """The partition's watermark (-1 before the first record), row-locked until commit
        (`locked`, for callers that need only the offset)."""
        return self.locked(session, topic, partition).offset

    def locked(self, session: Session, topic: str, partition: int) -> Locked:
        """The partition's watermark row, locked until commit.

        The lock serialises every instance of this consumer on this partition: a second instance
        waits here, then sees the advanced watermark and skips what was applied (a row locked
        FOR UPDATE is read as the holder committed it). One round trip once the row exists
        (every batch but the partition's first)."""
        named = self._named(topic, partition)
        row = session.execute(statements.LOCK, named).one_or_none()
        if row is None:
            here = {"consumer": self.consumer, "topic": topic, "partition": partition}
            session.execute(
                pg_insert(watermarks)
                .values(offset=-1, any_parked=self._any_parked(topic, partition), **here)
                .on_conflict_do_nothing()
            )
            row = session.execute(statements.LOCK, named).one()
        identity = (
            TopicIdentity(row.cluster_id, row.topic_id)
            if row.cluster_id is not None and row.topic_id is not None
            else None
        )
        return Locked(
            int(row.offset),
            bool(row.any_parked),
            identity,
            states_from_row(row),
            row.stopped,
            bool(row.by_position),
            int(row.epoch),
            dict(row.source_identities or {}),
            frozenset(str(i) for i in row.replay_ids or ()),
        )

    def advance(
        self,
        session: Session,
        topic: str,
        partition: int,
        offset: int,
        applied: Sequence[tuple[str, int]] = (),
        *,
        sources: Mapping[str, SourceState] | None = None,
        identity: TopicIdentity | None = None,
        identities: Mapping[str, str] | None = None,
        replay_ids: frozenset[str] | None = None,
        lost: Mapping[str, Any] | None = None,
    ) -> None:
        """Set the (locked) watermark, with the sources' states (``sources``: their tops and the
        ids at them; their floors are the operators' to move; ``lost``: their lost histories as
        `losts_changed` gives them), their databases'
        ``identities`` and the offsets' ``identity`` when given (kept when None), and, with a
        window, remember the slice's ``applied`` (event id, offset) pairs (`remember`) and
        forget the slices below the new floor: one statement.

        A slice is forgotten whole once its last offset falls below the floor; one straddling
        the floor stays whole, so the window may keep up to a slice more than ``window``
        offsets (never fewer)."""
        tops, ids, _ = states_to_json(sources) if sources is not None else ({}, {}, {})
        params: dict[str, Any] = {
            **self._named(topic, partition),
            "p_offset": offset,
            "p_sources": None if sources is None else tops,
            "p_tops": None if sources is None else ids,
            "p_lost": None if lost is None else dict(lost),
            "p_identities": None if identities is None else dict(identities),
            "p_replay_ids": None if replay_ids is None else sorted(replay_ids),
            "p_cluster_id": None if identity is None else identity.cluster_id,
            "p_topic_id": None if identity is None else identity.topic_id,
        }
        if not self.window:
            session.execute(statements.MARK, params)
            return
        params["p_floor"] = prune_floor(offset, self.window)
        if not applied:
            session.execute(statements.MARK_PRUNE, params)
            return
        params.update(self._slice(topic, partition, applied))
        session.execute(statements.MARK_PRUNE_REMEMBER, params)

    def held_at(
        self, session: Session, topic: str, partition: int, offsets: Sequence[int]
    ) -> dict[int, str]:
        """The event id the window holds at each of ``offsets`` it still covers (the caller
        holds the partition's lock)."""
        if not self.window or not offsets:
            return {}
        rows = session.execute(
            statements.HELD_AT,
            {
                **self._named(topic, partition),
                "p_first": min(offsets),
                "p_last": max(offsets),
                "p_offsets": ",".join(str(o) for o in offsets),
            },
        )
        return {int(offset): str(event_id) for offset, event_id in rows}

    def positions(self, conn: Executor, topics: Sequence[str]) -> dict[tuple[str, int], int]:
        """Next offset to read per (topic, partition) of ``topics``: watermark + 1, or -2 (Kafka's
        earliest) for a partition with nothing applied, whose log may no longer start at 0 (a
        mirror, retention)."""
        rows = conn.execute(
            select(watermarks.c.topic, watermarks.c.partition, watermarks.c.offset).where(
                watermarks.c.consumer == self.consumer, watermarks.c.topic.in_(topics)
            )
        ).all()
        return {(t, int(p)): int(o) + 1 if o >= 0 else -2 for t, p, o in rows}

    def view(
        self, session: Session, locked: Locked, decoded: Sequence[Decoded], *, ids_kept: bool
    ) -> PartitionView:
        """What the judgement needs of the partition for ``decoded`` (keyed, in offset order),
        read under the partition's lock: the window's ids of the records whose decision may
        need them (`asks_window`: the common record, above its source's top, needs none), the
        parked keys when the partition has parked records, the decided ids (parked, skipped)
        of the records below their source's top, and the window's ids at replayed offsets."""
        first = decoded[0].record
        topic, partition, mark = first.topic, first.partition, locked.offset
        states = locked.sources
        asked = [
            d.event_id
            for d in decoded
            if asks_window(states, mark, d.record.offset, d.source, d.position)
        ]
        below = [d.event_id for d in decoded if below_top(states, mark, d)]
        replayed = [d.record.offset for d in decoded if d.record.offset <= mark]
        return PartitionView(
            watermark=mark,
            recent_ids=self.recent(session, topic, partition, asked),
            parked_keys=(
                self.parked_keys(session, topic, partition, (d.key for d in decoded))
                if locked.any_parked
                else frozenset()
            ),
            sources=states,
            held=self.held_at(session, topic, partition, replayed),
            by_position=locked.by_position,
            ids_kept=ids_kept,
            parked_ids=self.decided_ids(
                session, topic, partition, (asked if locked.any_parked else []) + below
            ),
            replay_ids=locked.replay_ids,
        )

    # -- window of recent event ids ------------------------------------------------------------
    # Callers hold the partition's watermark lock (`lock`): it serialises every reader and
    # writer of the window, which is what keeps an id from being applied twice (see tables.py).
    def recent(
        self, session: Session, topic: str, partition: int, ids: Iterable[str | None]
    ) -> frozenset[str]:
        """Which of ``ids`` were applied within the window, in one statement: the partition's
        slices unnested, joined with the wanted ids (one array parameter, a hash join)."""
        if not self.window:
            return frozenset()
        # Only ids in canonical UUID form were ever remembered (applied records decoded).
        wanted = canonical_uuids(ids)
        if not wanted:
            return frozenset()
        rows = session.execute(
            statements.RECENT, {**self._named(topic, partition), "p_wanted": wanted}
        )
        return frozenset(r[0] for r in rows)

    def remember(
        self, session: Session, topic: str, partition: int, applied: Sequence[tuple[str, int]]
    ) -> None:
        """Record a slice's applied (event id, offset) pairs as one window row, without moving
        the watermark (redrive; the apply loop passes them to `advance`). Nothing when the
        window is 0 or nothing was applied."""
        if not self.window or not applied:
            return
        params = {**self._named(topic, partition), **self._slice(topic, partition, applied)}
        session.execute(statements.REMEMBER, params)

    def remember_redriven(
        self, session: Session, topic: str, partition: int, event_id: str, offset: int
    ) -> None:
        """`remember` one redriven record. A record parked before the partition was started
        over has an offset of the topic's former incarnation, which a window row of the new
        one may start at already: it is then remembered below every offset the window holds
        (as a start-over keeps its ids), not at its own."""
        if not self.window:
            return
        scope = self.match(recent_ids, topic, partition)
        taken = session.execute(
            select(recent_ids.c.first_offset).where(*scope, recent_ids.c.first_offset == offset)
        ).first()
        if taken is not None:
            lowest = session.execute(select(func.min(recent_ids.c.first_offset)).where(*scope))
            offset = min(int(lowest.scalar_one()), 0) - 1
        self.remember(session, topic, partition, [(event_id, offset)])

    @staticmethod
    def _slice(topic: str, partition: int, applied: Sequence[tuple[str, int]]) -> dict[str, Any]:
        """A window row's parameters for ``applied``. An id twice in one slice aborts the
        transaction: the decision let a duplicate effect through (so does an id that is not a
        UUID)."""
        pairs = sorted(applied, key=lambda pair: pair[1])
        event_ids = [event_id for event_id, _ in pairs]
        if len(set(event_ids)) != len(event_ids):
            raise ValueError(f"{topic}[{partition}]: an event id applied twice in one slice")
        joined = ",".join(event_ids)
        if joined.count(",") != len(event_ids) - 1:  # the server's cast finds other non-UUIDs
            raise ValueError(f"{topic}[{partition}]: an event id that is not a UUID: {joined!r}")
        return {
            "p_first_offset": pairs[0][1],
            "p_last_offset": pairs[-1][1],
            "p_event_ids": joined,
            "p_offsets": ",".join(str(offset) for _, offset in pairs),
        }

    def append_ledger(
        self, session: Session, topic: str, partition: int, applied: Sequence[tuple[str, int]]
    ) -> None:
        """Append a slice's applied (event id, offset) pairs to the ledger, in the transaction
        that applied them (nothing when the ledger is off)."""
        if not self.ledger or not applied:
            return
        session.execute(
            insert(ledger),
            [
                {
                    "consumer": self.consumer,
                    "topic": topic,
                    "partition": partition,
                    "offset": offset,
                    "event_id": event_id,
                }
                for event_id, offset in applied
            ],
        )


def below_top(states: Mapping[str, SourceState], mark: int, d: Decoded) -> bool:
    """True when ``d``, above the watermark, is at or below its known source's top: whether it
    was decided here (parked, skipped) tells a re-send from positions gone back."""
    state = states.get(d.source) if d.source is not None else None
    return (
        state is not None
        and d.position is not None
        and d.record.offset > mark
        and (d.position <= state.top)
    )


def canonical_uuids(ids: Iterable[str | None]) -> str:
    """The distinct ids among ``ids`` that are UUIDs in canonical form, sorted and joined by
    commas. One pattern over the joined text when every id is one (the common slice: 0.6 against
    1.2 ms for 1,000 ids checked one by one), else a pattern per id."""
    distinct = sorted({i for i in ids if i})
    joined = ",".join(distinct)
    if len(joined) == 37 * len(distinct) - 1 and _UUID_LIST.fullmatch(joined):
        return joined
    return ",".join(i for i in distinct if _is_uuid(i))


# Canonical UUIDs joined by commas (with the length check above: no id holds a comma).
_UUID_LIST = re.compile(rf"(?:{CANONICAL_UUID.pattern},)*{CANONICAL_UUID.pattern}")


def _is_uuid(text: str) -> bool:
    """True when ``text`` is a UUID in canonical form (as `str(uuid.UUID(...))` writes it); a
    pattern, not a parse: it runs for every id of a slice."""
    return CANONICAL_UUID.fullmatch(text) is not None
