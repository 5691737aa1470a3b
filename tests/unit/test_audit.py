"""Sorting a partition's events for the audit (pure: no Kafka, no database)."""

from __future__ import annotations

from collections import Counter

from spark_consumers.audit import Event, InboxRows, classify, group_events

T = "outbox.event.order"


def rows(mark: int, applied: dict[str, int], parked=(), skipped=(), twice=None) -> InboxRows:
    return InboxRows(
        {(T, 0): mark},
        Counter(applied),
        frozenset((T, 0, o) for o in parked),
        frozenset((T, 0, o) for o in skipped),
        has_ledger=bool(applied),
        twice=twice or {},
    )


def test_a_resend_is_one_event_and_unreadable_records_count_by_offset():
    events = group_events([(5, "b"), (0, "a"), (1, None), (7, "a"), (2, None)])
    assert events == [
        Event("a", (0, 7)),
        Event(None, (1,)),
        Event(None, (2,)),
        Event("b", (5,)),
    ]


def test_each_category_is_told_apart():
    events = [
        Event("applied", (0,)),
        Event("twice", (1,)),
        Event("resent", (2, 9)),  # applied at its second offset
        Event(None, (3,)),  # undecodable, parked
        Event("skipped", (4,)),
        Event("lost", (5,)),
        Event("pending", (11,)),
    ]
    inbox = rows(
        10,
        {"applied": 1, "twice": 2, "resent": 1},
        parked=[3],
        skipped=[4],
        twice={"twice": (1, 8)},
    )
    audit = classify(T, 0, events, inbox, end=12, exact=True)
    assert audit.counts == {
        "applied": 2,
        "duplicate": 1,
        "parked": 1,
        "skipped": 1,
        "pending": 1,
        "lost": 1,
    }
    assert audit.events == 7
    assert audit.examples == {"lost": ["lost"], "duplicate": ["twice"]}
    assert audit.applied_at == {"twice": [1, 8]}  # where its two ledger rows were applied


def test_without_a_ledger_the_watermark_covers_what_it_passed():
    events = [Event("x", (0,)), Event("y", (1,)), Event("z", (5,))]
    audit = classify(T, 0, events, rows(1, {}, parked=[1]), end=6, exact=False)
    assert audit.counts["applied"] == 1
    assert audit.counts["parked"] == 1
    assert audit.counts["pending"] == 1
    assert audit.counts["lost"] == 0


def test_a_partition_never_applied_has_everything_pending():
    audit = classify(T, 1, [Event("x", (0,))], rows(10, {"x": 1}), end=1, exact=True)
    assert audit.watermark == -1
    assert audit.counts["applied"] == 1  # the ledger wins over the watermark
    audit = classify(T, 1, [Event("y", (0,))], rows(10, {}), end=1, exact=True)
    assert audit.counts["pending"] == 1
