"""The inbox's judgement of a record by its source's position, over explicit per-source state
(pure, no I/O). `inbox.decision.Decider` asks it first; the offsets and the window of ids judge
what it leaves (records without a position, sources new to the partition).

A partition keeps, per source (keyed by its database's identity where records carry one, the
name a label: `inbox.position.source_keys`), a `SourceState`:

- ``top``: the highest position decided here (applied, parked, or held behind a parked key);
- ``at_top``: the ids decided at ``top``, the ties of one multi-row write (one statement's rows
  share a position), so a re-send of the top event is known whatever the window forgot;
- ``floor``: at or below it, a record is a re-read of what this partition (a start-over) or the
  topic's other partitions (`outboxkit cdc add-partitions`) decided. It lasts until the source's
  next new event (a position above the top): the re-read it was laid for is then over, and a
  record at or below it may as well be a restored database's new event. A database restored
  while a floor is up (the re-read not over) has its new events below the floor taken for
  re-reads: its timeline is not in its identity (the runbook: let the re-read end first);
- ``lost``: the history a restored database lost (`Lost`): what it wrote after the fork up to
  the old top was decided here, and its new history reuses those positions. A re-read from
  before the new history's first record (a failover to a mirror, a re-created topic) skips the
  lost history's records by it, until that record is read again.

What each verdict proves:

- position above ``top``: a new event (WAL order: its source never wrote it before here);
- at ``top``, id in ``at_top``: decided here; id not in it: another row of the same write, new;
- below ``top``, at or below the offsets' watermark: a replay of a decided offset;
- below ``top``, above the watermark: a re-send when its id is known decided (the window, the
  parked and skipped records), a re-read when at or below ``floor``; else the source's positions
  went back (a database restored or failed over, two databases under one name) and the
  partition stops: nothing proves it applied, nothing proves it new.

The state moves only by `taken` (a record decided) and by the operators' transitions in
`inbox.transitions`."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from inbox.stops import went_back
from outboxkit.kernel.wire.position import Position


class Action(enum.Enum):
    """What the apply loop does with one record."""

    APPLY = "apply"
    SKIP_REPLAY = "skip_replay"  # offset at or below the partition's watermark
    SKIP_DUPLICATE = "skip_duplicate"  # decided here already: a re-send, a re-read
    PARK = "park"  # undecodable, unknown type, invalid payload, or handler kept failing
    HOLD = "hold"  # same key as a parked record: parked behind it to keep per-key order
    # Nothing proves the record applied and nothing proves it new (offsets or positions that
    # changed meaning): neither applied nor skipped, the partition stops with the reason.
    STOP = "stop"


# The position a partition keeps for a source it saw only without a readable one (a fresh
# connector's first transaction, ``[null, "<lsn>"]``): the source is known to the partition, so
# a start-over judges its records by id, not as a new source's; below every real position.
UNREAD: Position = (0, 0)


@dataclass(frozen=True)
class Lost:
    """The history a source's database lost when it was restored or failed over to a copy
    whose history left the decided one at ``fork`` (`new_history`): its records in
    (``fork``, ``top``] were decided here, and the new history writes positions there again.
    ``marker``: the event id of the new history's first record in this partition (the record
    the partition stopped on). ``before``: the partition re-reads the topic from before the
    marker (a start-over on a mirror), so a record in the lost range is the lost history's
    until the marker comes.

    Known limit: a re-read whose topic no longer holds the marker (retention deleted it, and
    with it every lost record before it) never comes past it, and takes the new history's
    records in the lost range for re-reads until a record above the lost top ends it."""

    fork: Position
    top: Position
    marker: str
    before: bool = False

    def holds(self, position: Position, event_id: str | None) -> bool:
        """True when a record at ``position`` is the lost history's, read again."""
        return self.before and event_id != self.marker and self.fork < position <= self.top


@dataclass(frozen=True)
class SourceState:
    """What one partition knows of one source: see the module's docstring. ``pending``: new
    histories an operator named (`new_history`) whose first record here (its marker) was not
    read yet: the state judges as before until it comes (the old history's unread tail comes
    first), then switches (`settled`); in order, when the database was restored again before
    the first one's marker was read."""

    top: Position
    at_top: frozenset[str] = frozenset()
    floor: Position | None = None
    lost: Lost | None = None
    pending: tuple[tuple[Position, str], ...] = ()

    def taken(self, position: Position | None, event_id: str | None) -> SourceState:
        """The state once a record of this source at ``position`` was decided here."""
        ids = frozenset() if event_id is None else frozenset((event_id,))
        state = self.settled(ids) if self.lost or self.pending else self
        if position is None:
            return state
        if position > state.top:
            floor = _kept(state.floor, position)
            return replace(state, top=position, at_top=ids, floor=floor).settled()
        if position == state.top and event_id is not None and event_id not in state.at_top:
            return replace(state, at_top=state.at_top | ids)
        return state

    def settled(self, read: Iterable[str] = ()) -> SourceState:
        """The state moved on by the ``read`` event ids: a pending new history's marker read,
        the switch to it (what the old history decided above the fork, and a lost range before
        it, become the lost range); a re-read past the lost history's marker; the lost range
        forgotten once the new history's top is above it (a floor then covers it, ties
        included)."""
        state = self
        if state.pending and state.pending[0][1] in read:
            (fork, marker), rest = state.pending[0], state.pending[1:]
            top = max(state.top, state.lost.top) if state.lost else state.top
            lost = Lost(fork, top, marker) if top > fork else None
            state = SourceState(fork, frozenset(), fork, lost, rest)
        lost = state.lost
        if lost is None:
            return state
        if state.top > lost.top:
            return replace(state, lost=None)
        if lost.before and lost.marker in read:
            return replace(state, lost=replace(lost, before=False))
        return state


def _kept(floor: Position | None, top: Position) -> Position | None:
    """A floor once a source's top rose to ``top``: gone above it. A new event above the floor
    ends the re-read it was laid for (a source's records come in position order but for
    re-sends), and a record at or below it may from then on as well be a restored database's
    new event: only its id proves a re-send."""
    return floor if floor is not None and top <= floor else None


def first(position: Position | None, event_id: str | None) -> SourceState:
    """The state of a source whose first record here is at ``position`` (None: unread)."""
    return SourceState(UNREAD).taken(position, event_id)


@dataclass(frozen=True)
class Verdict:
    """A record judged by its source's position: ``action`` (a skip or a stop) and why."""

    action: Action
    reason: str


def judge(
    source: str,
    state: SourceState,
    position: Position,
    event_id: str | None,
    *,
    replayed: bool,
    decided: bool | None,
) -> Verdict | None:
    """The verdict on a record of a known ``source`` at ``position``; None: a new event (what
    the rest of the decision says of new events applies). ``replayed``: its offset is at or
    below the watermark's; ``decided``: its id is known decided here (the window, the batch, the
    parked and skipped records); None: no window keeps ids, and a position below the top is
    taken for a re-send by itself."""
    top = state.top
    where = f"source {source} position {list(position)}"
    lost = state.lost
    if lost is not None and lost.holds(position, event_id):
        return Verdict(
            Action.SKIP_DUPLICATE,
            f"{where} is in the history its database lost ({list(lost.fork)}, {list(lost.top)}]"
            f", read again before the new history's first event {lost.marker}",
        )
    if position > top:
        if replayed and lost is not None and lost.fork < position <= lost.top:
            # the lost history's record at an offset decided before the new one began
            return Verdict(Action.SKIP_REPLAY, f"{where} at a decided offset")
        return None  # new (also at a decided offset: a re-created topic's, no identity given)
    if position == top:
        if replayed:
            return Verdict(Action.SKIP_REPLAY, f"{where} at a decided offset")
        if decided or (event_id is not None and event_id in state.at_top):
            return Verdict(Action.SKIP_DUPLICATE, f"{where} is its top, event {event_id} decided")
        if decided is None and not state.at_top:  # stored before the top's ids were kept
            return Verdict(Action.SKIP_DUPLICATE, f"{where} is its top (no window, by position)")
        return None  # another row of the write that gave the top: new
    below = f"{where} < {list(top)}"
    if replayed:
        return Verdict(Action.SKIP_REPLAY, f"{below} at a decided offset")
    if decided:
        return Verdict(Action.SKIP_DUPLICATE, f"{below}: event {event_id} decided here")
    if state.floor is not None and position <= state.floor:
        floor = list(state.floor)
        return Verdict(Action.SKIP_DUPLICATE, f"{below}, at or below its floor {floor}: a re-read")
    if decided is None:
        return Verdict(Action.SKIP_DUPLICATE, f"{below}: a re-send (no window, by position)")
    return Verdict(Action.STOP, went_back(source, position, top, event_id))


def claimed_below(
    states: Mapping[str, SourceState],
    before: Mapping[str, str],
    after: Mapping[str, str],
    first_seen: Mapping[str, Position | None],
) -> str | None:
    """The source whose positions, stored before its records carried a database identity, a
    database now claims with a record at or below them (``before``/``after``: the identities
    per key before and after the slice; ``first_seen``: per key, the first position the slice
    brings of it); None when every claim, if any, is by a record above them. Such a record may
    be another database's under the same name, or a re-read: nothing tells which database wrote
    the stored positions, so the partition stops (`unclaimed`) for an operator to say."""
    for key in after:
        if key in before or key not in states:
            continue
        position = first_seen.get(key)
        if position is None or position <= states[key].top:
            return key
    return None


def advanced(
    states: Mapping[str, SourceState],
    decided: Iterable[tuple[str | None, Position | None, str | None]],
) -> dict[str, SourceState]:
    """``states`` with each decided record (source key, position, event id) taken in, as
    `SourceState.taken` one by one would (a record the lost history holds, not: it was
    skipped by it); a source seen first gets its state (`UNREAD` without a position). One pass
    and one new state per source: a slice's thousand records would otherwise build a thousand
    states. A source with a lost history is taken in one by one (its marker splits the slice)."""
    losing = {k for k, s in states.items() if s.lost is not None or s.pending}
    if not losing:
        return _advanced(states, decided)
    records = list(decided)
    out = _advanced(states, [r for r in records if r[0] not in losing])
    for source, position, event_id in records:
        if source not in losing:
            continue
        state = out[source]
        if event_id is not None:
            state = state.settled((event_id,))
        lost = state.lost
        if lost is not None and position is not None and lost.holds(position, event_id):
            out[source] = state
            continue
        out[source] = state.taken(position, event_id)
    return out


def _advanced(
    states: Mapping[str, SourceState],
    decided: Iterable[tuple[str | None, Position | None, str | None]],
) -> dict[str, SourceState]:
    tops: dict[str, tuple[Position | None, set[str]]] = {}
    for source, position, event_id in decided:
        if source is None:
            continue
        top, ids = tops.get(source, (None, set()))
        if position is not None and (top is None or position > top):
            tops[source] = (position, set() if event_id is None else {event_id})
            continue
        if position is not None and position == top and event_id is not None:
            ids.add(event_id)
        tops.setdefault(source, (top, ids))
    out = dict(states)
    for source, (top, ids) in tops.items():
        state = out.get(source)
        if state is None:
            out[source] = SourceState(top or UNREAD, frozenset(ids))
        elif top is None or top < state.top:
            continue
        elif top > state.top:
            out[source] = SourceState(top, frozenset(ids), _kept(state.floor, top))
        elif not ids <= state.at_top:
            out[source] = replace(state, at_top=state.at_top | ids)
    return out


def started_over(
    states: Mapping[str, SourceState], *, recreated: bool = False
) -> dict[str, SourceState]:
    """The states of a partition started over (its topic re-read from the start of another
    incarnation or a mirror): every decided position becomes the source's floor, so the re-read
    is skipped whatever the window keeps; ties at the top are judged by ``at_top``. A lost
    history (`Lost`) is read again before its marker on a mirror; ``recreated``: the topic was
    deleted and created again on its cluster, so nothing of a lost history (nor a pending new
    history's marker) comes again: pending switches are made, the lost range forgotten."""
    out: dict[str, SourceState] = {}
    for key, state in states.items():
        if recreated:
            for _, marker in state.pending:
                state = state.settled((marker,))
            state = replace(state, lost=None)
        elif state.lost is not None:
            state = replace(state, lost=replace(state.lost, before=True))
        out[key] = replace(state, floor=max(state.top, state.floor or state.top)).settled()
    return out


def rewound(states: Mapping[str, SourceState], again: Iterable[str]) -> dict[str, SourceState]:
    """``states`` once an operator's rewind will read again the records whose events ``again``
    holds (the window's ids above its target): a lost history whose marker is among them is
    read again from before its marker. Known limit: a rewind below what the window holds, past
    a marker it forgot, reads the lost history's records above the new history's top as new."""
    ids = set(again)
    return {
        k: replace(s, lost=replace(s.lost, before=True))
        if s.lost is not None and s.lost.marker in ids
        else s
        for k, s in states.items()
    }


def floored(
    states: Mapping[str, SourceState], top: Position | None = None
) -> dict[str, SourceState]:
    """``states`` with each top its floor, or ``top`` where higher (the top a stop names: its
    slice went above the stored one before the re-send it stopped on): the records at or below
    it are re-sends the window forgot."""
    return {
        k: replace(s, floor=max(s.top, s.floor or s.top, top or s.top)) for k, s in states.items()
    }


def raised(
    rows: Iterable[Mapping[str, SourceState]], sources: Iterable[str]
) -> dict[str, SourceState]:
    """The state every partition of a topic gets for each of ``sources`` (keys) before the topic
    gets more partitions, its connectors paused and the consumer caught up: the highest top any
    partition decided, the ids decided at it in any partition, that top as the floor."""
    wanted = set(sources)
    best: dict[str, SourceState] = {}
    for row in rows:
        for key, state in row.items():
            if key not in wanted:
                continue
            known = best.get(key)
            if known is None or state.top > known.top:
                best[key] = SourceState(state.top, state.at_top, state.top)
            elif state.top == known.top:
                best[key] = replace(known, at_top=known.at_top | state.at_top)
    return best


def shared_ties(
    states: Mapping[str, SourceState], names: Mapping[str, str]
) -> dict[str, SourceState]:
    """``states`` (raised, per group: `raised`) with the ids decided at a top shared by groups
    of one name (``names``: per group, its source name) known in each: positions stored
    without identity under a name may be one of its databases', and an event id names one
    event whichever group decided it, so a re-send of either's top event is skipped wherever
    it lands."""
    out = dict(states)
    for group, state in states.items():
        shared = [
            other.at_top
            for key, other in states.items()
            if key != group and names[key] == names[group] and other.top == state.top
        ]
        if shared:
            out[group] = replace(state, at_top=state.at_top.union(*shared))
    return out


def new_history(
    fork: int, before: SourceState | None = None, marker: str | None = None
) -> SourceState:
    """A source whose database was restored or failed over to a copy whose history left the
    decided one at LSN ``fork``: what it wrote up to the fork was decided (a re-read), what it
    writes after is new, whatever positions the lost history reached. ``before``: the source's
    state until then (None: none was stored, the partition stopped in its first slice of it);
    ``marker``: the new history's first record here (the one the partition stopped on). With
    a marker, the old state judges until it is read (the old history's unread tail may come
    first), and what the old history decided above the fork is then remembered as lost
    (`Lost`)."""
    end: Position = (fork, 2**63 - 1)
    if marker is None:
        return SourceState(end, frozenset(), end)
    if before is None:  # stopped in its first slice here: nothing of it was decided yet
        before = SourceState(UNREAD)
    return replace(before, pending=(*before.pending, (end, marker)))
