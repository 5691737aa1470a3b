"""Where a source position does not name one event, the inbox on the real Postgres judges by the
event's id or stops the partition with the reason: an event re-sent under another source name,
two events of one write sharing a position, two databases under one source name, a source whose
positions went back, a re-send of a parked event, a held key on a re-created topic for a caller
that gives no identity, and what a start-over lets through. Each event is applied once; nothing
is skipped in silence."""

from __future__ import annotations

import json
import uuid

import pytest
from sqlalchemy import select

from inbox import EXACTLY_ONCE_WINDOW, Inbox, moves
from inbox.decision import Action
from inbox.position import OffsetsMoved, TopicIdentity
from inbox.tables import parked, watermarks
from outboxkit.kernel.wire.record import KafkaRecord
from tests.integration.test_inbox_apply import effect_counts, effects_md, recorder

A = TopicIdentity("cluster-a", "topic-a")
RECREATED = TopicIdentity("cluster-a", "topic-a2")


@pytest.fixture(scope="module", autouse=True)
def effects_table(engine):
    effects_md.create_all(engine)


@pytest.fixture
def consumer():
    return f"pos-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def topic():
    return f"pos-{uuid.uuid4().hex[:6]}"


def event(
    topic,
    offset,
    n,
    *,
    position=None,
    source="orders-db",
    key=b"k",
    commit=None,
    origin=None,
    kind=(b"t", b"Tick"),
):
    """Event ``n`` (its id follows from ``n``) at ``offset``; its position (commit, change)
    is ``position``, else (n, n); ``commit="null"``: a fresh connector's first transaction;
    ``origin``: its database's identity (the sourceIdentity header); ``kind``: its aggregate
    type and event type."""
    commit_lsn, change_lsn = position or (n, n)
    headers = [
        ("id", str(uuid.uuid5(uuid.NAMESPACE_OID, f"{topic}-{n}")).encode()),
        ("eventType", kind[1]),
        ("aggregateType", kind[0]),
    ]
    if source is not None:
        sequence = f'[{"null" if commit == "null" else json.dumps(str(commit_lsn))},"{change_lsn}"]'
        headers += [("sourceName", source.encode()), ("sourcePosition", sequence.encode())]
    if origin is not None:
        headers.append(("sourceIdentity", origin.encode()))
    return KafkaRecord(topic, 0, offset, key, json.dumps({"n": n}).encode(), headers, None)


def applied_once(engine, consumer, count):
    counts = effect_counts(engine, consumer)
    assert len(counts) == count and set(counts.values()) == {1}, counts


def row(engine, consumer, topic):
    with engine.connect() as conn:
        return conn.execute(
            select(watermarks).where(watermarks.c.consumer == consumer, watermarks.c.topic == topic)
        ).one()


def test_a_tail_resent_under_a_new_source_name_is_skipped_across_many_slices(
    engine, consumer, topic
):
    """A connector whose `topic.prefix` changed (or a second connector on the outbox) sends
    the unconfirmed tail again under the new name, here over three slices: none applied twice."""
    inbox = Inbox(engine, consumer, recorder(consumer), window=EXACTLY_ONCE_WINDOW)
    inbox.apply_partition([event(topic, o, o + 1) for o in range(30)], A)
    offset = 30
    for start in (10, 20, 25):  # events 11..30 again, then new ones, under "orders-db-v2"
        chunk = [
            event(topic, offset + i, n, source="orders-db-v2")
            for i, n in enumerate(range(start + 1, start + 6))
        ]
        offset += len(chunk)
        result = inbox.apply_partition(chunk, A)
        assert result.count(Action.APPLY) == 0, result.counts
    new = inbox.apply_partition(
        [event(topic, offset + i, 31 + i, source="orders-db-v2") for i in range(3)], A
    )
    assert new.count(Action.APPLY) == 3
    applied_once(engine, consumer, 33)


def test_events_sharing_one_position_split_across_slices_are_each_applied_once(
    engine, consumer, topic
):
    """One COPY (one multi-insert WAL record) gives its rows one position: the second slice's
    rows at that position are new events, and a re-send of the first slice's one is not."""
    inbox = Inbox(engine, consumer, recorder(consumer), window=EXACTLY_ONCE_WINDOW)
    shared = (50, 60)
    first = inbox.apply_partition([event(topic, 0, 1), event(topic, 1, 2, position=shared)], A)
    assert first.count(Action.APPLY) == 2
    second = inbox.apply_partition(
        [event(topic, 2, 3, position=shared), event(topic, 3, 4, position=shared)], A
    )
    assert second.count(Action.APPLY) == 2, second.counts
    resent = inbox.apply_partition(
        [event(topic, 4, 2, position=shared), event(topic, 5, 5, position=(70, 70))], A
    )
    assert (resent.count(Action.SKIP_DUPLICATE), resent.count(Action.APPLY)) == (1, 1)
    applied_once(engine, consumer, 5)


def test_two_databases_under_one_source_name_stop_the_partition_with_the_reason(
    engine, consumer, topic
):
    """Database B's positions are lower than database A's under the same name: its events are
    not skipped in silence; the partition stops, saying why, and nothing of the slice is
    applied or skipped."""
    inbox = Inbox(engine, consumer, recorder(consumer), window=EXACTLY_ONCE_WINDOW)
    inbox.apply_partition([event(topic, 0, 1, position=(9000, 9000))], A)
    with pytest.raises(OffsetsMoved, match="positions went back") as stopped:
        inbox.apply_partition([event(topic, 1, 2, position=(100, 100))], A)
    assert "two databases under one source name" in stopped.value.reason
    assert "went back" in row(engine, consumer, topic).stopped
    assert row(engine, consumer, topic).offset == 0
    applied_once(engine, consumer, 1)


def test_two_databases_under_one_source_name_with_their_identities_apply_every_event_once(
    engine, consumer, topic
):
    """With the connector's sourceIdentity header, database B's events under the name A uses
    are a source of their own (``orders-db@<B>``): interleaved, lower positions and all, each
    event is applied once and nothing stops; a re-send of each database's is skipped."""
    inbox = Inbox(engine, consumer, recorder(consumer), window=EXACTLY_ONCE_WINDOW)
    a, b = "7001/orders", "7002/orders"
    first = [event(topic, 0, 1, position=(9000, 9000), origin=a)]
    first += [event(topic, 1, 2, position=(100, 100), origin=b)]
    first += [event(topic, 2, 3, position=(9010, 9010), origin=a)]
    assert inbox.apply_partition(first, A).count(Action.APPLY) == 3
    later = [
        event(topic, 3, 4, position=(90, 90), origin=b),  # below B's own: gone back, for B
        event(topic, 4, 5, position=(110, 110), origin=b),
        event(topic, 5, 2, position=(100, 100), origin=b),  # B's re-send
        event(topic, 6, 3, position=(9010, 9010), origin=a),  # A's re-send
    ]
    with pytest.raises(OffsetsMoved, match="positions went back"):
        inbox.apply_partition(later, A)
    with pytest.raises(OffsetsMoved):  # stopped until an operator decides
        inbox.apply_partition(later[1:], A)
    stopped = row(engine, consumer, topic)
    assert stopped.source_identities == {"orders-db": a, f"orders-db@{b}": b}
    assert stopped.sources == {"orders-db": [9010, 9010], f"orders-db@{b}": [100, 100]}
    applied_once(engine, consumer, 3)


def test_two_databases_under_one_name_each_growing_are_both_applied(engine, consumer, topic):
    inbox = Inbox(engine, consumer, recorder(consumer), window=EXACTLY_ONCE_WINDOW)
    a, b = "7001/orders", "7002/orders"
    records = []
    for i in range(10):  # interleaved: A's positions far above B's
        records.append(event(topic, 2 * i, 100 + i, position=(9000 + i, 9000 + i), origin=a))
        records.append(event(topic, 2 * i + 1, 200 + i, position=(10 + i, 10 + i), origin=b))
    for chunk in (records[:7], records[7:13], records[13:]):
        assert inbox.apply_partition(chunk, A).count(Action.APPLY) == len(chunk)
    resent = [event(topic, 20 + i, 200 + i, position=(10 + i, 10 + i), origin=b) for i in range(3)]
    assert inbox.apply_partition(resent, A).count(Action.SKIP_DUPLICATE) == 3
    assert row(engine, consumer, topic).stopped is None
    applied_once(engine, consumer, 20)


def test_a_resent_parked_event_is_skipped_not_taken_for_a_position_gone_back(
    engine, consumer, topic
):
    inbox = Inbox(engine, consumer, recorder(consumer, fail_keys={"bad"}), window=10_000)
    result = inbox.apply_partition(
        [event(topic, 0, 1, key=b"bad"), event(topic, 1, 2), event(topic, 2, 3)], A
    )
    assert result.count(Action.PARK) == 1 and result.count(Action.APPLY) == 2
    resent = inbox.apply_partition([event(topic, 3, 1, key=b"bad"), event(topic, 4, 4)], A)
    assert (resent.count(Action.SKIP_DUPLICATE), resent.count(Action.APPLY)) == (1, 1)
    assert row(engine, consumer, topic).stopped is None


def test_a_held_key_on_a_recreated_topic_without_identity_is_never_dropped(engine, consumer, topic):
    """A caller that passes no identity: the re-created topic's records at the old offsets are
    judged by their positions; the one held behind its key's parked record, at an offset the
    old topic's record is parked at, is not dropped: the partition stops, saying why, and the
    window's insert at the restarted offsets does not fail."""
    inbox = Inbox(engine, consumer, recorder(consumer, fail_keys={"bad"}), window=10_000)
    old = [event(topic, 0, 1), event(topic, 1, 2, key=b"bad"), event(topic, 2, 3)]
    old += [event(topic, 3, 4)]
    assert inbox.apply_partition(old).count(Action.PARK) == 1
    # Re-created: new events at offsets 0.. (positions above the old ones), no identity given.
    fresh = inbox.apply_partition([event(topic, 0, 5)])
    assert fresh.count(Action.APPLY) == 1  # the window's insert at offset 0 did not fail
    with pytest.raises(OffsetsMoved, match="offset 1 holds parked event"):
        inbox.apply_partition([event(topic, 1, 6, key=b"bad")])
    with engine.connect() as conn:
        kept = conn.execute(
            select(parked.c.offset, parked.c.payload).where(parked.c.consumer == consumer)
        ).all()
    assert [(o, json.loads(p)["n"]) for o, p in kept] == [(1, 2)]  # the old one, still there
    assert "holds parked event" in row(engine, consumer, topic).stopped
    applied_once(engine, consumer, 4)


def test_after_a_start_over_a_new_source_and_a_fresh_connector_pass(engine, consumer, topic):
    """Started over by positions: a source the partition never saw (a new database on the
    topic) and a fresh connector's first transaction (no last commit yet) are new events; the
    re-read of what was applied is skipped by the floors."""
    inbox = Inbox(engine, consumer, recorder(consumer), window=EXACTLY_ONCE_WINDOW)
    inbox.apply_partition([event(topic, o, o + 1) for o in range(5)], A)
    with pytest.raises(OffsetsMoved):
        inbox.apply_partition([event(topic, 0, 1)], RECREATED)
    [move] = moves.moved(engine, consumer, {topic: RECREATED})
    moves.start_over(engine, move)
    # the top itself: its own event is told by the ids at the top, another one there is a tie
    assert row(engine, consumer, topic).floors == {"orders-db": [5, 5]}
    reread = [event(topic, o, o + 1) for o in range(5)]
    others = [
        event(topic, 5, 6, source="billing-db", position=(3, 3)),
        event(topic, 6, 7, source="ledger-db", commit="null", position=(0, 40)),
        event(topic, 7, 8),
    ]
    result = inbox.apply_partition(reread + others, RECREATED)
    assert (result.count(Action.SKIP_DUPLICATE), result.count(Action.APPLY)) == (5, 3)
    applied_once(engine, consumer, 8)


def test_a_rebase_clears_a_partition_stopped_on_a_record_without_position(engine, consumer, topic):
    """After a start-over, a record no known source's position judges (written before the
    connector added positions) stops the partition; the operator's rebase vouches for the
    offsets above its watermark, and such records are then judged by offset."""
    inbox = Inbox(engine, consumer, recorder(consumer), window=EXACTLY_ONCE_WINDOW)
    inbox.apply_partition([event(topic, o, o + 1) for o in range(3)], A)
    with pytest.raises(OffsetsMoved):
        inbox.apply_partition([event(topic, 0, 1)], RECREATED)
    [move] = moves.moved(engine, consumer, {topic: RECREATED})
    moves.start_over(engine, move)
    bare = [event(topic, 0, 10, source=None), event(topic, 1, 11)]
    with pytest.raises(OffsetsMoved, match="carries no position"):
        inbox.apply_partition(bare, RECREATED)
    [move] = moves.moved(engine, consumer, {topic: RECREATED})
    moves.start_over(engine, move, RECREATED, by_operator=True)
    result = inbox.apply_partition(bare, RECREATED)
    assert result.count(Action.APPLY) == 2
    applied_once(engine, consumer, 5)


def test_a_partition_that_saw_only_a_fresh_connector_s_first_transaction_starts_over_by_id(
    engine, consumer, topic
):
    """A fresh connector's first transaction carries no readable position: the partition still
    knows its source, so a re-created topic starts it over automatically, and a re-read of
    those events (a mirror) is skipped by their ids, which the start-over kept."""
    inbox = Inbox(engine, consumer, recorder(consumer), window=EXACTLY_ONCE_WINDOW)
    first = [event(topic, o, o + 1, commit="null") for o in range(3)]
    inbox.apply_partition(first, A)
    assert row(engine, consumer, topic).sources == {"orders-db": [0, 0]}
    with pytest.raises(OffsetsMoved):
        inbox.apply_partition([event(topic, 0, 9)], RECREATED)
    [move] = moves.moved(engine, consumer, {topic: RECREATED})
    assert move.automatic
    moves.start_over(engine, move)
    mirrored = [event(topic, o, o + 1, commit="null") for o in range(3)] + [event(topic, 3, 9)]
    result = inbox.apply_partition(mirrored, RECREATED)
    assert (result.count(Action.SKIP_DUPLICATE), result.count(Action.APPLY)) == (3, 1)
    applied_once(engine, consumer, 4)
