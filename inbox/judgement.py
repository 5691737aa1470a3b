"""The inbox's judgement of a record by its source's position, over explicit per-source state
(pure, no I/O). `inbox.decision.Decider` asks it first; the offsets and the window of ids judge
what it leaves (records without a position, sources new to the partition).

A partition keeps, per source (keyed by its database's identity where records carry one, the
name a label: `inbox.position.source_keys`), a `SourceState`:

- ``top``: the highest position decided here (applied, parked, or held behind a parked key);
- ``at_top``: the ids decided at ``top``, the ties of one multi-row write (one statement's rows
  share a position), so a re-send of the top event is known whatever the window forgot;
- ``floor``: at or below it, a record is a re-read of what this partition (a start-over) or the
  topic's other partitions (`outboxkit cdc add-partitions`) decided. A database restored under
  the same identity while a floor is up has its new events below the floor taken for re-reads:
  its timeline is not in its identity, so the operator must say (`inbox rebase --new-history`).

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
class SourceState:
    """What one partition knows of one source: see the module's docstring."""

    top: Position
    at_top: frozenset[str] = frozenset()
    floor: Position | None = None

    def taken(self, position: Position | None, event_id: str | None) -> SourceState:
        """The state once a record of this source at ``position`` was decided here."""
        if position is None:
            return self
        ids = frozenset() if event_id is None else frozenset((event_id,))
        if position > self.top:
            # The floor stays: a connector that sends at least once may re-send what it covers
            # after new events (clearing it then would stop the partition on the re-send).
            return replace(self, top=position, at_top=ids)
        if position == self.top and event_id is not None and event_id not in self.at_top:
            return replace(self, at_top=self.at_top | ids)
        return self


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
    if position > top:
        return None
    where = f"source {source} position {list(position)}"
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


def went_back(source: str, position: Position, top: Position, event_id: str | None) -> str:
    """Why a partition stops on a record whose source's position went back."""
    return (
        f"event {event_id} has source {source} position {list(position)}, below the "
        f"{list(top)} the partition decided, and nothing says it was applied here: the "
        "source's positions went back (a database restored or failed over, two databases under "
        "one source name), or it is a re-send the window no longer holds; see the runbook "
        "'When positions go back' (outboxkit inbox rebase --new-history or --as-resends)"
        f"{GONE_BACK}"
    )


def stopped_source(reason: str) -> str | None:
    """The source a stop reason names (`went_back`, `unclaimed`); None for other stops."""
    if UNCLAIMED in reason and reason.startswith("source "):
        return reason[len("source ") :].split("'s positions", 1)[0]
    if GONE_BACK not in reason:
        return None
    head, sep, _ = reason.partition(" has source ")
    return reason[len(head) + len(sep) :].split(" position ", 1)[0] if sep else None


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


def unclaimed(source: str, identity: str) -> str:
    """Why a partition stops on `claimed_below`'s source."""
    return (
        f"source {source}'s positions were stored before its records carried a database "
        f"identity, and database {identity} claims them with a record at or below them: which "
        "database wrote them is not known here; see the runbook 'When positions go back' "
        f"(outboxkit inbox rebase --source-identity {source}=IDENTITY){UNCLAIMED}"
    )


UNCLAIMED = " [positions without identity]"


# The tail of a stop reason for positions gone back: what `inbox.transitions.rebase` looks for
# to refuse a plain rebase (its floors would skip a restored database's new events).
GONE_BACK = " [positions went back]"


def held(reason: str | None) -> tuple[bool, bool]:
    """Whether a stop ``reason`` is on positions gone back, and on positions without identity:
    the stops a plain start-over would hide (`inbox.transitions.refusal`), so neither the
    driver nor a plain rebase resumes them."""
    text = reason or ""
    return GONE_BACK in text, UNCLAIMED in text


def advanced(
    states: Mapping[str, SourceState],
    decided: Iterable[tuple[str | None, Position | None, str | None]],
) -> dict[str, SourceState]:
    """``states`` with each decided record (source key, position, event id) taken in, as
    `SourceState.taken` one by one would; a source seen first gets its state (`UNREAD` without
    a position). One pass and one new state per source: a slice's thousand records would
    otherwise build a thousand states."""
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
            out[source] = SourceState(top, frozenset(ids), state.floor)
        elif not ids <= state.at_top:
            out[source] = replace(state, at_top=state.at_top | ids)
    return out


def started_over(states: Mapping[str, SourceState]) -> dict[str, SourceState]:
    """The states of a partition started over (its topic re-read from the start of another
    incarnation or a mirror): every decided position becomes the source's floor, so the re-read
    is skipped whatever the window keeps; ties at the top are judged by ``at_top``."""
    return {
        key: replace(state, floor=max(state.top, state.floor or state.top))
        for key, state in states.items()
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


def new_history(fork: int) -> SourceState:
    """A source whose database was restored or failed over to a copy whose history left the
    decided one at LSN ``fork``: what it wrote up to the fork was decided (a re-read), what it
    writes after is new, whatever positions the lost history reached."""
    end: Position = (fork, 2**63 - 1)
    return SourceState(end, frozenset(), end)
