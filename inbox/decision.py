"""The inbox decision for each record of one partition: apply, skip, or park (pure, no I/O)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from inbox.judgement import Action, SourceState, first, judge
from outboxkit.kernel.wire.position import Position

__all__ = ["Action", "Decider", "Decision", "Incoming", "PartitionView", "decide"]


@dataclass(frozen=True)
class Incoming:
    """What the decision needs to know of one Kafka record."""

    offset: int
    key: str | None
    event_id: str | None
    event_type: str | None = None
    decode_error: str | None = None
    invalid: str | None = None  # why its payload must not be applied (the handler's check)
    source: str | None = None  # the source database's name, with the position (`inbox.position`)
    position: Position | None = None
    refused: str | None = None  # why its source may not publish it (`inbox.publishers`)


@dataclass(frozen=True)
class PartitionView:
    """The inbox state of one (consumer, topic, partition) as read inside the transaction."""

    watermark: int  # highest applied offset, -1 when nothing was applied yet
    recent_ids: frozenset[str]  # applied event ids within the dedup window
    parked_keys: frozenset[str]  # keys with a parked record that was not redriven yet
    # Per source key, what the partition decided of it (`inbox.judgement.SourceState`).
    sources: Mapping[str, SourceState] = field(default_factory=dict)
    # The event id the window holds at each of the slice's offsets at or below the watermark.
    held: Mapping[int, str] = field(default_factory=dict)
    # Started over by its sources' positions: a record it cannot judge by one stops it.
    by_position: bool = False
    # The window keeps applied ids: a position below its source's top is a re-send only when
    # its id is known. False: by the position alone.
    ids_kept: bool = False
    # Decided event ids among those asked (`asks_window`) that the window does not hold: parked
    # here, or skipped by an operator.
    parked_ids: frozenset[str] = frozenset()
    # An operator's rewind: these events, read above the watermark, are applied once more
    # (`inbox.operations.rewind`); others are judged as usual.
    replay_ids: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Decision:
    """The action for one offset and, when not applied, why."""

    offset: int
    action: Action
    reason: str = ""


class Decider:
    """Decides one partition's records in offset order, remembering what the batch did so far.

    Ids and keys seen earlier in the batch count: a re-send inside the batch is skipped, and a
    record parked in this batch (by decision, or because its handler failed, reported through
    ``parked``) holds every later record of its key.

    A record of a source the partition knows, with a position, is judged by its source's state
    (`inbox.judgement.judge`), not by its offset. Other records are judged by the offset, and
    one at an applied offset that holds another event than the window says stops the
    partition: the offsets changed meaning. In a partition started over by its sources'
    positions, a record no known source's position judges stops it unless its id was applied."""

    def __init__(self, view: PartitionView, *, known_types: Iterable[str] | None = None) -> None:
        self._types = None if known_types is None else frozenset(known_types)
        self._seen = set(view.recent_ids)
        self._parked = set(view.parked_keys)
        self._parked_ids = set(view.parked_ids)
        self._mark = view.watermark
        self._last = view.watermark
        self._sources = dict(view.sources)
        self._held = view.held
        self._by_position = view.by_position
        self._ids_kept = view.ids_kept
        self._replay_ids = set(view.replay_ids)

    def decide(self, record: Incoming) -> Decision:
        """The action for the next record; offsets must be given in increasing order."""
        source, position = record.source, record.position
        state = self._sources.get(source) if source is not None else None
        if state is not None and (state.lost or state.pending) and record.event_id is not None:
            assert source is not None  # a new history's first record switches to it
            state = self._sources[source] = state.settled((record.event_id,))
        rewound = record.offset > self._mark and record.event_id in self._replay_ids
        if state is not None and position is not None and not rewound:
            assert source is not None
            verdict = judge(
                source,
                state,
                position,
                record.event_id,
                replayed=record.offset <= self._mark,
                decided=self._applied(record) if self._ids_kept else None,
            )
            if verdict is not None:
                return Decision(record.offset, verdict.action, verdict.reason)
        elif record.offset <= self._last:
            held = self._held.get(record.offset)
            if held is not None and record.event_id is not None and held != record.event_id:
                return Decision(record.offset, Action.STOP, offsets_moved(record, held))
            return Decision(record.offset, Action.SKIP_REPLAY, f"offset <= {self._last}")
        elif self._by_position and not rewound and (source is None or state is not None):
            # No position a known source can judge it by: its id may still say it was applied.
            if self._ids_kept and self._applied(record):
                return Decision(record.offset, Action.SKIP_DUPLICATE, _applied_here(record))
            return Decision(record.offset, Action.STOP, unjudged(record))
        self._last = max(self._last, record.offset)
        if source is not None and position is not None:
            self._sources[source] = (
                first(position, record.event_id)
                if state is None
                else state.taken(position, record.event_id)
            )
        if rewound:  # applied again once, its re-sends in the rewound offsets skipped
            self._replay_ids.discard(str(record.event_id))
        decision = self._decide_new(record)
        if decision.action is Action.APPLY and record.event_id is not None:
            self._seen.add(record.event_id)
        elif decision.action in (Action.PARK, Action.HOLD):
            self.parked(record)
        return decision

    def _applied(self, record: Incoming) -> bool:
        """True when the record's event was applied (the window, the batch) or parked here."""
        event_id = record.event_id
        return event_id is not None and (event_id in self._seen or event_id in self._parked_ids)

    def parked(self, record: Incoming) -> None:
        """Report that ``record`` ended up parked (e.g. its handler kept failing)."""
        if record.key is not None:
            self._parked.add(record.key)
        if record.event_id is not None:
            self._seen.discard(record.event_id)
            self._parked_ids.add(record.event_id)

    def _decide_new(self, record: Incoming) -> Decision:
        if record.event_id is not None and record.event_id in self._seen:
            return Decision(
                record.offset, Action.SKIP_DUPLICATE, f"event {record.event_id} applied"
            )
        if record.key is not None and record.key in self._parked:
            return Decision(
                record.offset, Action.HOLD, f"held behind a parked record of key {record.key}"
            )
        if record.decode_error is not None:
            return Decision(record.offset, Action.PARK, f"undecodable: {record.decode_error}")
        if record.refused is not None:
            return Decision(record.offset, Action.PARK, f"refused: {record.refused}")
        if self._types is not None and record.event_type not in self._types:
            return Decision(record.offset, Action.PARK, f"unknown event type {record.event_type!r}")
        if record.invalid is not None:
            return Decision(record.offset, Action.PARK, f"invalid payload: {record.invalid}")
        return Decision(record.offset, Action.APPLY)


def decide(
    view: PartitionView,
    records: Sequence[Incoming],
    *,
    known_types: Iterable[str] | None = None,
) -> list[Decision]:
    """Decide every record of one partition's batch, in offset order (no handler failures)."""
    decider = Decider(view, known_types=known_types)
    return [decider.decide(r) for r in sorted(records, key=lambda r: r.offset)]


def offsets_moved(record: Incoming, held: str) -> str:
    """Why a partition stops on ``record``: its offset held event ``held`` when applied."""
    return (
        f"offset {record.offset} held event {held} when it was applied and now holds event "
        f"{record.event_id}: the partition's offsets no longer mean what its watermark says (a "
        "re-created topic, or another cluster); see the runbook 'When offsets change'"
    )


def _applied_here(record: Incoming) -> str:
    return f"event {record.event_id} applied or parked here (source {record.source})"


def asks_window(
    sources: Mapping[str, SourceState],
    mark: int,
    offset: int,
    source: str | None,
    position: Position | None,
) -> bool:
    """True when deciding the record may need to know whether its event was applied or parked
    here, so its id is looked up in the window (and the parked and skipped records): a record
    judged by offset or with a source new to the partition; one above the watermark whose
    position is not above its source's top (a tie, a re-send, a position gone back); and, in a
    partition with several sources, every record (an event re-sent under another source name
    has a position new to that name). A record with a known source's position above its top,
    the common one, is not looked up."""
    state = sources.get(source) if source is not None else None
    if state is None or position is None:
        return True
    if position <= state.top:
        return offset > mark
    return len(sources) > 1


def unjudged(record: Incoming) -> str:
    """Why a partition started over by positions stops on ``record``."""
    return (
        f"offset {record.offset} (event {record.event_id}) carries no position of a source the "
        "partition knows, and the partition was started over by its sources' positions: its "
        "offset cannot tell a replay from a new event; see the runbook 'When offsets change'"
    )


def prune_floor(watermark: int, window: int) -> int:
    """Offsets below this fall out of the dedup window and their ids can be forgotten."""
    return watermark - window + 1
