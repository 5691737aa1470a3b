"""The inbox's judgement on the real Postgres, through the public `Inbox` API and the operator
functions the CLI and the console call, for each sequence that once applied an event twice or
lost one in silence: a failover re-read spanning many micro-batches, a source's top event
re-sent once the window forgot it, a restored database and the runbook's path (also followed
by a failover that re-reads the history it lost), partitions
added with two databases under one name, a rewind then a failover, a skipped event re-sent, a
record parked before a start-over redriven after it, a renamed source's tail, and partitions
added after connectors began writing their databases' identities. Every event
is applied once; every stop names its source and has a path that ends with that."""

from __future__ import annotations

import uuid

import pytest

from inbox import Inbox, moves, operations, transitions
from inbox.decision import Action
from inbox.position import OffsetsMoved, TopicIdentity
from inbox.stops import stopped_source
from tests.integration.test_inbox_apply import effect_counts, effects_md, recorder
from tests.integration.test_inbox_positions import event, row

A = TopicIdentity("cluster-a", "topic-a")
MIRROR = TopicIdentity("cluster-m", "topic-a")


@pytest.fixture(scope="module", autouse=True)
def effects_table(engine):
    effects_md.create_all(engine)


@pytest.fixture
def consumer():
    return f"jdg-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def topic():
    return f"jdg-{uuid.uuid4().hex[:6]}"


def once(engine, consumer, count):
    """Exactly ``count`` events applied, each once."""
    found = effect_counts(engine, consumer)
    assert sorted(found.values()) == [1] * count, found


def fail_over(engine, inbox, consumer, topic, to):
    """What the consumer driver does when a partition's topic identity changed: the slice is
    refused, and the partition is started over for the new identity."""
    with pytest.raises(OffsetsMoved) as moved:
        inbox.apply_partition([event(topic, 0, 1)], to)
    assert moved.value.rebased
    (move,) = moves.moved(engine, consumer, {topic: to}, [topic])
    moves.start_over(engine, move, to)


def in_slices(inbox, records, identity, size):
    for start in range(0, len(records), size):
        inbox.apply_partition(records[start : start + size], identity)


def test_a_failover_re_read_over_many_slices_applies_nothing_twice_and_a_tie_it_missed(
    engine, consumer, topic
):
    """The consumer applied events 1-9 and the first row (10) of a two-row write at (10, 10);
    the mirror holds all eleven. Its re-read, two records a slice at a window of 4, skips every
    applied one (the top's own event by the ids kept at the top, whatever the window forgot)
    and applies the tie it had not read, then what follows."""
    inbox = Inbox(engine, consumer, recorder(consumer), window=4)
    written = [event(topic, n - 1, n) for n in range(1, 10)]
    written += [event(topic, 9, 10, position=(10, 10)), event(topic, 10, 11, position=(10, 10))]
    in_slices(inbox, written[:10], A, 3)
    fail_over(engine, inbox, consumer, topic, MIRROR)
    mirrored = [r._replace(offset=r.offset + 100) for r in written]
    mirrored.append(event(topic, 111, 12))
    in_slices(inbox, mirrored, MIRROR, 2)
    once(engine, consumer, 12)
    assert row(engine, consumer, topic).stopped is None


def test_a_second_source_s_top_event_re_sent_after_the_window_forgot_it_is_skipped(
    engine, consumer, topic
):
    """Two sources in one partition: orders-db fills the window while billing-db's connector
    is down; billing-db's re-send of its top event is told by the ids at its top."""
    inbox = Inbox(engine, consumer, recorder(consumer), window=4)
    inbox.apply_partition([event(topic, 0, 1, source="billing-db", position=(7, 7))], A)
    inbox.apply_partition([event(topic, o, 100 + o) for o in range(1, 12)], A)
    again = inbox.apply_partition([event(topic, 12, 1, source="billing-db", position=(7, 7))], A)
    assert again.count(Action.SKIP_DUPLICATE) == 1
    once(engine, consumer, 12)


def test_a_restored_database_stops_the_partition_and_only_the_new_history_path_resumes_it(
    engine, consumer, topic
):
    """A database restored from a physical backup keeps its identity and writes again from
    the backup's LSN (95): its new events sit below the partition's top. The partition stops
    naming the source; a plain rebase is refused (its floors would skip the new events); the
    new history from the fork applies them, and skips a re-send from before the fork."""
    inbox = Inbox(engine, consumer, recorder(consumer), window=4)
    inbox.apply_partition([event(topic, o, n) for o, n in enumerate(range(90, 101))], A)
    restored = [
        event(topic, 11, 93),  # a re-send from before the fork
        event(topic, 12, 200, position=(96, 96)),
        event(topic, 13, 201, position=(97, 97)),
    ]
    with pytest.raises(OffsetsMoved, match="positions went back") as stopped:
        inbox.apply_partition(restored, A)
    assert stopped_source(stopped.value.reason) == "orders-db"
    (move,) = moves.moved(engine, consumer, {topic: A}, [topic])
    with pytest.raises(transitions.Refused, match="--new-history"):
        transitions.rebase(engine, [move], A, transitions.Rebase())
    transitions.rebase(engine, [move], A, transitions.Rebase(histories={"orders-db": 95}))
    again = inbox.apply_partition(restored, A)
    assert (again.count(Action.APPLY), again.count(Action.SKIP_DUPLICATE)) == (2, 1)
    once(engine, consumer, 13)


def test_a_restored_database_then_a_failover_re_reads_its_lost_history_without_applying_it(
    engine, consumer, topic
):
    """The database restored to LSN 95 had reached 100: once the partition resumed with the new
    history, a failover to a mirror re-reads both histories in small slices. The lost history's
    records above the new history's top (98-100) are skipped until the new history's first
    record comes again; the new history's next event, at a position the lost one used, is
    applied. A restart after the failover keeps that state (it is stored with the watermark)."""
    inbox = Inbox(engine, consumer, recorder(consumer), window=4)
    old = [event(topic, o, n) for o, n in enumerate(range(90, 101))]
    inbox.apply_partition(old, A)
    restored = [event(topic, 11, 200, position=(96, 96)), event(topic, 12, 201, position=(97, 97))]
    with pytest.raises(OffsetsMoved, match="positions went back"):
        inbox.apply_partition(restored, A)
    (move,) = moves.moved(engine, consumer, {topic: A}, [topic])
    transitions.rebase(engine, [move], A, transitions.Rebase(histories={"orders-db": 95}))
    inbox.apply_partition(restored, A)
    once(engine, consumer, 13)
    fail_over(engine, inbox, consumer, topic, MIRROR)
    mirrored = [r._replace(offset=r.offset + 100) for r in [*old, *restored]]
    in_slices(inbox, mirrored[:7], MIRROR, 2)
    inbox = Inbox(engine, consumer, recorder(consumer), window=4)  # a restarted consumer
    in_slices(inbox, mirrored[7:], MIRROR, 2)
    once(engine, consumer, 13)
    inbox.apply_partition([event(topic, 113, 202, position=(98, 98))], MIRROR)
    once(engine, consumer, 14)
    assert row(engine, consumer, topic).stopped is None


def test_partitions_added_with_two_databases_under_one_name_raise_each_by_its_own(
    engine, consumer, topic
):
    """Partition 0 saw database A first under orders-db, partition 1 database B: the name is
    a different database in each. Adding a partition raises each database by its own positions
    everywhere, so B's later events, below A's positions, are applied in every partition."""
    a, b = "7001/orders", "7002/orders"
    inbox = Inbox(engine, consumer, recorder(consumer), window=4)
    inbox.apply_partition([event(topic, 0, 1, position=(9000, 9000), origin=a)], A)
    inbox.apply_partition(
        [
            event(topic, 0, 2, position=(100, 100), origin=b)._replace(partition=1),
            event(topic, 1, 3, position=(9001, 9001), origin=a)._replace(partition=1),
        ],
        A,
    )
    moves.raise_floors(engine, consumer, topic, 3, ["orders-db"])
    later = [
        event(topic, 1, 4, position=(101, 101), origin=b),
        event(topic, 2, 5, position=(102, 102), origin=b)._replace(partition=1),
        event(topic, 0, 6, position=(103, 103), origin=b)._replace(partition=2),
        event(topic, 1, 7, position=(9002, 9002), origin=a)._replace(partition=2),
    ]
    for record in later:
        assert inbox.apply_partition([record], A).count(Action.APPLY) == 1
    resent = event(topic, 2, 2, position=(100, 100), origin=b)._replace(partition=2)
    assert inbox.apply_partition([resent], A).count(Action.SKIP_DUPLICATE) == 1
    once(engine, consumer, 7)


def test_partitions_added_after_an_upgrade_skip_a_top_event_decided_without_identity(
    engine, consumer, topic
):
    """One write of two rows (one position) in two partitions before the connector wrote its
    database's identity; one row re-sent with it (its partition learns the database). Adding
    a partition raises the positions kept under the name alone and the database's together, so
    the other row, re-sent with its identity into the new partition, is known decided."""
    a = "7001/orders"
    inbox = Inbox(engine, consumer, recorder(consumer), window=4)
    inbox.apply_partition([event(topic, 0, 1, position=(101, 101))], A)
    first = event(topic, 0, 2, position=(101, 101))._replace(partition=1)
    resent = event(topic, 1, 2, position=(101, 101), origin=a)._replace(partition=1)
    assert inbox.apply_partition([first, resent], A).count(Action.SKIP_DUPLICATE) == 1
    moves.raise_floors(engine, consumer, topic, 3, ["orders-db"], [a])
    other = event(topic, 0, 1, position=(101, 101), origin=a)._replace(partition=2)
    assert inbox.apply_partition([other], A).count(Action.SKIP_DUPLICATE) == 1
    once(engine, consumer, 2)


def test_a_rewind_then_a_failover_applies_again_only_what_the_rewind_asked(engine, consumer, topic):
    """A rewind to offset 3 applies events 5 and 6 again (not the re-send of event 2 at offset
    4); a failover to a mirror afterwards re-reads everything and applies nothing again."""
    inbox = Inbox(engine, consumer, recorder(consumer), window=100)
    written = [event(topic, o, n) for o, n in ((0, 1), (1, 2), (2, 3), (3, 4))]
    written += [event(topic, 4, 2, position=(2, 2)), event(topic, 5, 5), event(topic, 6, 6)]
    inbox.apply_partition(written, A)
    assert operations.rewind(engine, consumer, topic, 0, 3) == 6
    again = inbox.apply_partition(written[4:], A)
    assert (again.count(Action.APPLY), again.count(Action.SKIP_DUPLICATE)) == (2, 1)
    fail_over(engine, inbox, consumer, topic, MIRROR)
    in_slices(inbox, [r._replace(offset=r.offset + 50) for r in written], MIRROR, 3)
    counts = effect_counts(engine, consumer)
    assert sorted(counts.values()) == [1, 1, 1, 1, 2, 2], counts


def test_a_skipped_event_re_sent_stays_skipped_and_the_partition_runs(engine, consumer, topic):
    """An operator skipped a parked event; its re-send, below its source's top, is neither
    applied nor taken for positions gone back."""
    handler = recorder(consumer, fail_keys={"bad"})
    inbox = Inbox(engine, consumer, handler, window=4, max_attempts=1)
    inbox.apply_partition([event(topic, 0, 1, key=b"bad"), event(topic, 1, 2)], A)
    (parked,) = operations.list_parked(engine, consumer)
    operations.skip(engine, parked["id"], by="ops", reason="bad data, fixed by hand")
    inbox.apply_partition([event(topic, o, 100 + o) for o in range(2, 9)], A)
    resent = inbox.apply_partition([event(topic, 9, 1, key=b"bad")], A)
    assert resent.count(Action.SKIP_DUPLICATE) == 1
    assert row(engine, consumer, topic).stopped is None
    assert len(effect_counts(engine, consumer)) == 8


def test_a_record_parked_before_a_start_over_is_redriven_after_it(engine, consumer, topic):
    """The new incarnation's window starts a slice at the parked record's old offset: the
    redrive remembers it elsewhere instead of failing on the window's key."""
    failing = {"bad"}
    handler = recorder(consumer, fail_keys=failing)
    inbox = Inbox(engine, consumer, handler, window=100, max_attempts=1)
    inbox.apply_partition([event(topic, 0, 1), event(topic, 1, 2, key=b"bad")], A)
    fail_over(engine, inbox, consumer, topic, MIRROR)
    inbox.apply_partition([event(topic, 1, 3), event(topic, 2, 4)], MIRROR)
    failing.clear()
    assert operations.redrive(inbox, topic, 0).applied == 1
    once(engine, consumer, 4)


def test_a_renamed_source_s_tail_is_never_applied_twice(engine, consumer, topic):
    """Renamed with its identity kept, the connector re-sends its unconfirmed tail under the
    new name: the top's event is skipped by the ids at the top; the older ones, which the
    window forgot, stop the partition (nothing proves them applied) and --as-resends resumes
    it, applying nothing twice."""
    origin = "7001/orders"
    inbox = Inbox(engine, consumer, recorder(consumer), window=4)
    in_slices(inbox, [event(topic, o, o + 1, origin=origin) for o in range(8)], A, 1)
    top = inbox.apply_partition([event(topic, 8, 8, source="orders-db2", origin=origin)], A)
    assert top.count(Action.SKIP_DUPLICATE) == 1
    tail = [
        event(topic, 9 + i, n, source="orders-db2", origin=origin) for i, n in enumerate((3, 4))
    ]
    with pytest.raises(OffsetsMoved, match="positions went back"):
        inbox.apply_partition(tail, A)
    (move,) = moves.moved(engine, consumer, {topic: A}, [topic])
    transitions.rebase(engine, [move], A, transitions.Rebase(resends=True))
    assert inbox.apply_partition(tail, A).count(Action.SKIP_DUPLICATE) == 2
    once(engine, consumer, 8)


def test_positions_stored_without_identity_are_claimed_only_by_the_database_named(
    engine, consumer, topic
):
    """Positions stored before records carried identities, then a failover: the re-read's
    first record is another database's (under the same name, below those positions). It may
    not claim them: the partition stops naming the source, a plain rebase is refused, and the
    operator's word (--source-identity) gives them to the database that wrote them; the other
    database's event is applied, the re-read skipped."""
    a, b = "7001/orders", "7002/orders"
    inbox = Inbox(engine, consumer, recorder(consumer), window=4)
    in_slices(inbox, [event(topic, o, o + 1) for o in range(5)], A, 2)  # no identity yet
    fail_over(engine, inbox, consumer, topic, MIRROR)
    mirrored = [event(topic, 0, 100, position=(3, 3), origin=b)]
    mirrored += [event(topic, o, o, origin=a) for o in range(1, 6)]
    with pytest.raises(OffsetsMoved, match="stored before its records carried") as stopped:
        inbox.apply_partition(mirrored, MIRROR)
    assert stopped_source(stopped.value.reason) == "orders-db"
    (move,) = moves.moved(engine, consumer, {topic: MIRROR}, [topic])
    with pytest.raises(transitions.Refused, match="--source-identity"):
        transitions.rebase(engine, [move], MIRROR, transitions.Rebase())
    transitions.rebase(engine, [move], MIRROR, transitions.Rebase(claims={"orders-db": a}))
    again = inbox.apply_partition(mirrored, MIRROR)
    assert (again.count(Action.APPLY), again.count(Action.SKIP_DUPLICATE)) == (1, 5)
    once(engine, consumer, 6)
    assert row(engine, consumer, topic).source_identities == {"orders-db": a, f"orders-db@{b}": b}


def test_a_slice_parked_whole_as_a_last_resort_then_redriven_applies_nothing_twice(
    engine, consumer, topic
):
    """After a failover, a slice of the re-read whose transaction keeps failing is parked by
    the last resort: only what the judgement takes for new (event 7) is parked, the re-reads
    are skipped, so the redrive applies event 7 and nothing again."""

    class Breaks(Inbox):
        """Commits that fail whatever the records: what no savepoint can catch."""

        def _transaction(self, records, *args, **kwargs):
            raise ValueError("something in the data the inbox does not know about")

    inbox = Inbox(engine, consumer, recorder(consumer), window=4)
    written = [event(topic, o, o + 1) for o in range(6)]
    in_slices(inbox, written, A, 2)
    fail_over(engine, inbox, consumer, topic, MIRROR)
    mirrored = [r._replace(offset=r.offset + 10) for r in written] + [event(topic, 16, 7)]
    broken = Breaks(engine, consumer, recorder(consumer), window=4)
    parked_whole = broken.apply_partition(mirrored, MIRROR)
    assert (parked_whole.count(Action.PARK), parked_whole.count(Action.SKIP_DUPLICATE)) == (1, 6)
    assert operations.redrive(inbox, topic, 0).applied == 1
    once(engine, consumer, 7)
