"""The inbox's rules when offsets change meaning (a re-created topic, a mirrored cluster, a
re-send landing anywhere): judged by source position when records carry one, stopped, never
skipped in silence, when they do not. The property test runs the rules the way the apply loop
composes them (`inbox.apply.Inbox._transaction`) over arbitrary interleavings."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from inbox.decision import Action, Decider, Incoming, PartitionView
from inbox.position import OffsetsMoved, TopicIdentity, judge_identity, merged
from outboxkit.kernel.wire.position import parse_position, source_position

A = TopicIdentity("cluster-1", "topic-a")
B = TopicIdentity("cluster-1", "topic-b")  # the same name re-created
MIRROR = TopicIdentity("cluster-2", "topic-m")


def view(watermark=-1, positions=None, held=None, recent=(), by_position=False):
    return PartitionView(
        watermark, frozenset(recent), frozenset(), positions or {}, held or {}, by_position
    )


def rec(offset, event_id, position=None, source="db"):
    return Incoming(
        offset, "k", event_id, "T", source=source if position else None, position=position
    )


def test_positions_parse_from_debeziums_sequence_and_refuse_other_shapes():
    assert parse_position('["24023128","24023160"]') == (24023128, 24023160)
    assert parse_position(b'[null,"33"]') is None  # a fresh connector's first transaction
    assert parse_position("[1,2,3]") is None
    assert parse_position('["x","2"]') is None
    assert parse_position(None) is None
    headers = [("id", b"e"), ("sourceName", b"orders"), ("sourcePosition", b'["5","7"]')]
    assert source_position(headers) == ("orders", (5, 7))
    assert source_position([("sourceName", b"orders")]) == (None, None)


def test_a_new_event_at_an_applied_offset_applies_when_its_position_is_new():
    decider = Decider(view(watermark=9, positions={"db": (100, 100)}))
    assert decider.decide(rec(3, "new", (120, 120))).action is Action.APPLY
    assert decider.decide(rec(4, "old", (90, 90))).action is Action.SKIP_REPLAY
    # above the watermark, a position already decided is a re-send
    assert decider.decide(rec(10, "again", (120, 120))).action is Action.SKIP_DUPLICATE


def test_another_event_at_an_applied_offset_stops_the_partition():
    decider = Decider(view(watermark=9, held={3: "first"}))
    stop = decider.decide(rec(3, "second"))
    assert stop.action is Action.STOP and "offset 3 held event first" in stop.reason
    assert decider.decide(rec(4, "unknown")).action is Action.SKIP_REPLAY  # nothing proves it


def test_a_changed_identity_rebases_with_positions_and_stops_without():
    assert judge_identity(A, A, {}) is None
    assert judge_identity(None, A, {}) is None  # recorded, not judged
    assert judge_identity(A, None, {}) is None
    moved = judge_identity(A, B, {"db": (1, 1)})
    assert isinstance(moved, OffsetsMoved) and moved.rebased
    stopped = judge_identity(A, MIRROR, {})
    assert stopped is not None and not stopped.rebased and "topic-m" in stopped.reason


# -- the property: a model of one consumer partition over moves of its topic ------------------


@dataclass
class Partition:
    """The inbox row of one partition and what the handler applied (a pure model)."""

    window: int
    watermark: int = -1
    identity: TopicIdentity | None = None
    positions: dict = field(default_factory=dict)
    recent: dict = field(default_factory=dict)  # offset -> event id, within the window
    applied: list = field(default_factory=list)
    stopped: str | None = None
    by_position: bool = False

    def apply(self, records, identity):
        """`Inbox._transaction` in the model: True when the slice was taken, False when the
        offsets moved (after a rebase or a stop, as `Inbox._moved`)."""
        if self.stopped:
            return False
        moved = judge_identity(self.identity, identity, self.positions)
        if moved is not None:
            if moved.rebased:  # the driver starts it over as the reader restarts
                self.watermark, self.identity, self.recent = -1, identity, {}
                self.by_position = True
            else:
                self.stopped = moved.reason
            return False
        mark = self.watermark
        held = {o: e for o, e in self.recent.items() if o <= mark}
        recent_ids = {e for e in self.recent.values()}
        decider = Decider(view(self.watermark, self.positions, held, recent_ids, self.by_position))
        decisions = [(r, decider.decide(r)) for r in records]
        if any(d.action is Action.STOP for _, d in decisions):
            self.stopped = "stop"
            return False
        for r, d in decisions:
            if d.action is Action.APPLY:
                self.applied.append(r.event_id)
                self.recent[r.offset] = r.event_id
            self.watermark = max(self.watermark, r.offset)
        judged = [r for r in records if r.offset > mark or r.source in self.positions]
        self.positions = merged(self.positions, ((r.source, r.position) for r in judged))
        self.recent = {o: e for o, e in self.recent.items() if o > self.watermark - self.window}
        self.identity = identity if identity is not None else self.identity
        return True


@dataclass
class Topic:
    """A topic's incarnations: what Debezium wrote (events with their positions), offsets
    starting at 0 in each incarnation; a mirror copies every record so far to new offsets."""

    positions_on: bool
    legacy_until: int = 0  # events below this number were written without positions
    incarnation: int = 0
    log: list = field(default_factory=list)  # records of the current incarnation
    written: list = field(default_factory=list)  # every event id ever written, in order
    next_event: int = 0

    def next_offset(self):
        return self.log[-1].offset + 1 if self.log else 0

    def identity(self):
        return TopicIdentity("c", f"t{self.incarnation}")

    def write(self, count):
        for _ in range(count):
            n = self.next_event
            self.next_event += 1
            position = (n + 1, n + 1) if self.positions_on else None
            if position is not None and self.legacy_until > n:
                position = None  # written before the connector added positions
            self.log.append(rec(self.next_offset(), f"e{n}", position))
            self.written.append(f"e{n}")

    def resend(self, back):
        """Debezium resumes ``back`` events early: they are written again, at new offsets."""
        for old in self.log[-back:] if back else ():
            self.log.append(rec(self.next_offset(), old.event_id, old.position))

    def recreate(self):
        self.incarnation += 1
        self.log = []

    def mirror(self):
        """A failover to a mirror holding the topic's retained records at other offsets."""
        self.incarnation += 1
        self.log = [rec(n + 3, r.event_id, r.position) for n, r in enumerate(self.log)]


MOVES = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.integers(1, 6)),
        st.tuples(st.just("resend"), st.integers(1, 4)),
        st.tuples(st.just("read"), st.integers(1, 8)),
        st.tuples(st.just("replay"), st.integers(1, 8)),
        st.tuples(st.just("recreate"), st.just(0)),
        st.tuples(st.just("mirror"), st.just(0)),
    ),
    max_size=40,
)


def run(moves, positions_on, window, identity_known=True, legacy=0):
    topic, part = Topic(positions_on, legacy), Partition(window)
    cursor = 0  # the consumer's next offset in the current incarnation

    def read(limit):
        nonlocal cursor
        for _ in range(limit):
            chunk = [r for r in topic.log if r.offset >= cursor][:8]
            if part.stopped or not chunk:
                return
            identity = topic.identity() if identity_known else None
            # after a move the reader starts again from the inbox's position
            cursor = chunk[-1].offset + 1 if part.apply(chunk, identity) else part.watermark + 1

    for move, n in moves:
        if move == "write":
            topic.write(n)
        elif move == "resend":
            topic.resend(min(n, len(topic.log)))
        elif move == "recreate":  # deleting a topic deletes what it holds: drained first
            read(200)
            topic.recreate()
            cursor = 0  # the reader sees the new topic from its start
        elif move == "mirror":
            topic.mirror()
            cursor = 0
        elif move == "replay":
            cursor = max(0, cursor - n)
        read(1)
    read(200)
    return topic, part


@settings(max_examples=400, deadline=None)
@given(MOVES)
def test_with_positions_every_event_is_applied_exactly_once_across_every_move(moves):
    topic, part = run(moves, positions_on=True, window=0)
    assert part.stopped is None
    assert sorted(part.applied, key=lambda e: int(e[1:])) == topic.written
    assert len(part.applied) == len(set(part.applied))


@settings(max_examples=400, deadline=None)
@given(MOVES, st.booleans())
def test_without_positions_nothing_is_skipped_unless_the_partition_stopped(moves, known):
    topic, part = run(moves, positions_on=False, window=10_000, identity_known=known)
    assert len(part.applied) == len(set(part.applied))  # never applied twice
    if part.stopped is None:  # never lost in silence: all written events applied
        assert set(part.applied) == set(topic.written)


@settings(max_examples=400, deadline=None)
@given(MOVES, st.integers(1, 12))
def test_an_upgrade_from_records_without_positions_never_applies_twice_or_loses_silently(
    moves, legacy
):
    """Events written before the connector added positions (their re-sends caught by the
    window), then events with them, across moves: nothing applied twice; nothing missing
    unless the partition stopped."""
    topic, part = run(moves, positions_on=True, window=10_000, legacy=legacy)
    assert len(part.applied) == len(set(part.applied))
    if part.stopped is None:
        assert set(part.applied) == set(topic.written)
