"""The inbox on the real Postgres when a partition's offsets change meaning: a re-created
topic and a failover to a mirrored cluster, with and without source positions on the records.
Nothing is applied twice, nothing is skipped in silence."""

from __future__ import annotations

import json
import uuid

import pytest
from sqlalchemy import select

from inbox import EXACTLY_ONCE_WINDOW, Inbox, moves
from inbox.decision import Action
from inbox.position import OffsetsMoved, Superseded, TopicIdentity
from inbox.tables import parked, watermarks
from outboxkit.kernel.wire.record import KafkaRecord
from tests.integration.test_inbox_apply import effect_counts, effects_md, recorder

A = TopicIdentity("cluster-a", "topic-a")
RECREATED = TopicIdentity("cluster-a", "topic-a2")
MIRROR = TopicIdentity("cluster-m", "topic-m")


@pytest.fixture(scope="module", autouse=True)
def effects_table(engine):
    effects_md.create_all(engine)


@pytest.fixture
def consumer():
    return f"moves-{uuid.uuid4().hex[:8]}"


def event(topic, offset, n, position=True, event_id=None, key=b"k"):
    headers = [
        ("id", (event_id or str(uuid.uuid5(uuid.NAMESPACE_OID, f"{topic}-{n}"))).encode()),
        ("eventType", b"Tick"),
        ("aggregateType", b"t"),
    ]
    if position:
        headers += [("sourceName", b"orders-db"), ("sourcePosition", f'["{n}","{n}"]'.encode())]
    return KafkaRecord(topic, 0, offset, key, json.dumps({"n": n}).encode(), headers, None)


def restart(engine, consumer, topic, identity):
    """What the consumer driver does when it starts: start over what positions can judge."""
    [move] = moves.moved(engine, consumer, {topic: identity})
    assert move.automatic
    moves.start_over(engine, move)


def row(engine, consumer, topic):
    with engine.connect() as conn:
        return conn.execute(
            select(watermarks).where(watermarks.c.consumer == consumer, watermarks.c.topic == topic)
        ).one()


def test_with_positions_a_recreated_topic_and_a_mirror_apply_each_event_once(engine, consumer):
    inbox = Inbox(engine, consumer, recorder(consumer), window=0)
    topic = f"moves-{uuid.uuid4().hex[:6]}"
    first = [event(topic, o, o + 1) for o in range(5)]  # positions 1..5
    inbox.apply_partition(first, A)
    # The topic is re-created: new events at the old offsets, under a new topic id.
    later = [event(topic, o, o + 6) for o in range(3)]  # positions 6..8 at offsets 0..2
    with pytest.raises(OffsetsMoved, match="topic-a2") as moved:
        inbox.apply_partition(later, RECREATED)
    assert moved.value.rebased
    assert "topic-a2" in row(engine, consumer, topic).stopped
    with pytest.raises(OffsetsMoved):  # stopped until the driver starts it over
        inbox.apply_partition(later, RECREATED)
    restart(engine, consumer, topic, RECREATED)
    started_over = row(engine, consumer, topic)
    assert (started_over.offset, started_over.topic_id) == (-1, "topic-a2")
    assert started_over.sources == {"orders-db": [5, 5]} and started_over.stopped is None
    assert inbox.apply_partition(later, RECREATED).count(Action.APPLY) == 3
    # A failover to a mirror: every event so far again, at other offsets, then a new one.
    mirrored = [event(topic, 100 + o, o + 1) for o in range(8)] + [event(topic, 108, 9)]
    with pytest.raises(OffsetsMoved):
        inbox.apply_partition(mirrored, MIRROR)
    restart(engine, consumer, topic, MIRROR)
    result = inbox.apply_partition(mirrored, MIRROR)
    assert result.count(Action.APPLY) == 1
    counts = effect_counts(engine, consumer)
    assert len(counts) == 9 and set(counts.values()) == {1}


def test_positions_judge_resends_and_the_window_keeps_their_ids_for_records_without(
    engine, consumer
):
    inbox = Inbox(engine, consumer, recorder(consumer), window=EXACTLY_ONCE_WINDOW)
    topic = f"moves-{uuid.uuid4().hex[:6]}"
    assert (
        inbox.apply_partition([event(topic, o, o + 1) for o in range(5)]).count(Action.APPLY) == 5
    )
    # Debezium resuming: the last two again at new offsets with their positions, then a new one.
    resent = inbox.apply_partition([event(topic, 5, 4), event(topic, 6, 5), event(topic, 7, 6)])
    assert (resent.count(Action.SKIP_DUPLICATE), resent.count(Action.APPLY)) == (2, 1)
    # The same event with no position is judged by its offset: the window still holds its id.
    bare = inbox.apply_partition([event(topic, 8, 6, position=False)])
    assert bare.count(Action.SKIP_DUPLICATE) == 1
    counts = effect_counts(engine, consumer)
    assert len(counts) == 6 and set(counts.values()) == {1}


def test_without_positions_a_changed_topic_id_stops_the_partition_until_rebased(engine, consumer):
    inbox = Inbox(engine, consumer, recorder(consumer))
    topic = f"moves-{uuid.uuid4().hex[:6]}"
    inbox.apply_partition([event(topic, o, o, position=False) for o in range(5)], A)
    later = [event(topic, o, 10 + o, position=False) for o in range(3)]
    for _ in range(2):  # stays stopped: neither applied nor skipped
        with pytest.raises(OffsetsMoved, match="no source position") as moved:
            inbox.apply_partition(later, RECREATED)
        assert not moved.value.rebased
    stopped = row(engine, consumer, topic)
    assert stopped.offset == 4 and "topic-a2" in stopped.stopped
    assert len(effect_counts(engine, consumer)) == 5
    # The driver cannot start it over (no positions); the operator does (the runbook's rebase).
    [move] = moves.moved(engine, consumer, {topic: RECREATED})
    assert not move.automatic and move.identity_changed
    moves.start_over(engine, move)
    assert inbox.apply_partition(later, RECREATED).count(Action.APPLY) == 3
    assert row(engine, consumer, topic).stopped is None
    assert len(effect_counts(engine, consumer)) == 8


def test_another_event_at_an_applied_offset_stops_the_partition_without_identity(engine, consumer):
    """No identity given (a caller of the API): the window proves the offsets moved."""
    inbox = Inbox(engine, consumer, recorder(consumer))
    topic = f"moves-{uuid.uuid4().hex[:6]}"
    inbox.apply_partition([event(topic, o, o, position=False) for o in range(5)])
    replay = [event(topic, o, o, position=False) for o in range(3)]
    assert inbox.apply_partition(replay).count(Action.APPLY) == 0  # a true replay: skipped
    moved = [event(topic, o, 20 + o, position=False) for o in range(3)]
    with pytest.raises(OffsetsMoved, match="offset 0 held event"):
        inbox.apply_partition(moved)
    assert "offset 0 held event" in row(engine, consumer, topic).stopped
    assert len(effect_counts(engine, consumer)) == 5


def test_a_record_parked_at_an_offset_an_older_topic_parked_at_is_kept(engine, consumer):
    """After a re-creation, a record parked at an offset where the old topic's record is still
    parked is parked too (one offset, two incarnations), never dropped."""
    inbox = Inbox(engine, consumer, recorder(consumer, fail_keys={"bad"}), window=0)
    topic = f"moves-{uuid.uuid4().hex[:6]}"
    inbox.apply_partition([event(topic, 0, 1, key=b"bad"), event(topic, 1, 2)], A)
    with pytest.raises(OffsetsMoved):
        inbox.apply_partition([event(topic, 0, 3, key=b"bad")], RECREATED)
    restart(engine, consumer, topic, RECREATED)
    result = inbox.apply_partition([event(topic, 0, 3, key=b"bad"), event(topic, 1, 4)], RECREATED)
    assert (result.count(Action.HOLD) + result.count(Action.PARK), result.count(Action.APPLY)) == (
        1,
        1,
    )
    with engine.connect() as conn:
        kept = conn.execute(
            select(parked.c.offset, parked.c.topic_id, parked.c.event_id).where(
                parked.c.consumer == consumer
            )
        ).all()
    assert sorted((o, t) for o, t, _ in kept) == [(0, "topic-a"), (0, "topic-a2")]


def test_a_reader_started_before_a_start_over_is_refused(engine, consumer):
    """A slice carrying the start-over count its query started with is refused once the
    partition was started over since (a task left over from before the restart), and nothing
    is recorded against the partition."""
    inbox = Inbox(engine, consumer, recorder(consumer), window=0)
    topic = f"moves-{uuid.uuid4().hex[:6]}"
    inbox.apply_partition([event(topic, 0, 1)], A, 0)
    with pytest.raises(OffsetsMoved):
        inbox.apply_partition([event(topic, 5, 7)], RECREATED, 0)
    restart(engine, consumer, topic, RECREATED)
    assert moves.epochs(engine, consumer, [topic]) == {(topic, 0): 1}
    with pytest.raises(Superseded):  # the old query's task, from the middle of the new topic
        inbox.apply_partition([event(topic, 5, 7)], RECREATED, 0)
    assert row(engine, consumer, topic).stopped is None
    assert inbox.apply_partition([event(topic, 0, 6)], RECREATED, 1).count(Action.APPLY) == 1


def test_adding_partitions_raises_only_the_paused_source_s_floors(engine, consumer):
    # Two sources on one topic: "shop" was paused and drained, "billing" kept publishing, so
    # partition 1 may still get billing's events below what partition 0 applied of it.
    topic = f"floors-{uuid.uuid4().hex[:6]}"
    positions = [{"shop": [10, 10], "billing": [50, 50]}, {"shop": [30, 30], "billing": [20, 20]}]
    with engine.begin() as conn:
        conn.execute(
            watermarks.insert(),
            [
                {"consumer": consumer, "topic": topic, "partition": p, "offset": 5, "sources": s}
                for p, s in enumerate(positions)
            ],
        )
    assert moves.raise_floors(engine, consumer, topic, 3, ["shop"]) == {"shop": (30, 30)}
    with engine.connect() as conn:
        found = conn.execute(
            select(watermarks.c.partition, watermarks.c.sources)
            .where(watermarks.c.consumer == consumer, watermarks.c.topic == topic)
            .order_by(watermarks.c.partition)
        ).all()
    assert [dict(s) for _, s in found] == [
        {"shop": [30, 30], "billing": [50, 50]},
        {"shop": [30, 30], "billing": [20, 20]},  # billing's own position kept
        {"shop": [30, 30]},  # the new partition: only the paused source's floor
    ]
    with engine.connect() as conn:
        floored = conn.execute(
            select(watermarks.c.floors)
            .where(watermarks.c.consumer == consumer, watermarks.c.topic == topic)
            .order_by(watermarks.c.partition)
        ).scalars()
        # a re-send of shop's events in any partition is skipped at or below the floor
        assert [dict(f) for f in floored] == [{"shop": [30, 30]}] * 3


def test_a_rewind_refuses_the_reader_that_started_before_it(engine, consumer):
    """A query reading from its checkpoint would never read the rewound offsets again: the
    rewind counts as a start-over, so that query's next slice is refused (it restarts from the
    inbox's watermarks) and the replay is applied by the one that starts after it."""
    from inbox import operations

    inbox = Inbox(engine, consumer, recorder(consumer), window=10)  # what it applies again
    topic = f"rewind-{uuid.uuid4().hex[:6]}"
    assert (
        inbox.apply_partition([event(topic, 0, 1), event(topic, 1, 2)], A, 0).count(Action.APPLY)
        == 2
    )
    operations.rewind(engine, consumer, topic, 0, 0)
    assert moves.epochs(engine, consumer, [topic]) == {(topic, 0): 1}
    with pytest.raises(Superseded):  # the query that read offset 1 already, from its checkpoint
        inbox.apply_partition([event(topic, 2, 3)], A, 0)
    replay = inbox.apply_partition([event(topic, 1, 2), event(topic, 2, 3)], A, 1)
    assert replay.count(Action.APPLY) == 2  # offset 1 applied again, as the rewind asked


def test_a_rebase_as_applied_up_to_an_offset_keeps_the_positions_that_judge_the_rest(
    engine, consumer
):
    """`inbox rebase --offset N`: the new incarnation's records above N are read, and those the
    old one applied are still skipped by their positions (set in the start-over's own
    transaction, not cleared by a rewind after it)."""
    inbox = Inbox(engine, consumer, recorder(consumer), window=0)
    topic = f"moves-{uuid.uuid4().hex[:6]}"
    inbox.apply_partition([event(topic, o, o) for o in range(5)], A)  # positions 0..4
    [move] = moves.moved(engine, consumer, {topic: RECREATED})
    moves.start_over(engine, move, RECREATED, offset=1)
    rebased = row(engine, consumer, topic)
    assert rebased.offset == 1 and rebased.sources and rebased.stopped is None
    # The new topic holds events 3..6 at offsets 2..5: 3 and 4 were applied already.
    result = inbox.apply_partition([event(topic, o, o + 1) for o in range(2, 6)], RECREATED)
    assert result.count(Action.APPLY) == 2 and result.count(Action.SKIP_DUPLICATE) == 2
    assert len(effect_counts(engine, consumer)) == 7
