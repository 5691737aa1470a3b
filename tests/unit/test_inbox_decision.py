from hypothesis import given
from hypothesis import strategies as st

from inbox.decision import Action, Decider, Incoming, PartitionView, decide, prune_floor

EMPTY = PartitionView(watermark=-1, recent_ids=frozenset(), parked_keys=frozenset())


def rec(offset, key="k", event_id=None, event_type="T", decode_error=None):
    return Incoming(offset, key, event_id or f"e{offset}", event_type, decode_error)


def actions(decisions):
    return [d.action for d in decisions]


def test_fresh_partition_applies_everything_in_offset_order():
    out = decide(EMPTY, [rec(2), rec(0), rec(1)])
    assert [d.offset for d in out] == [0, 1, 2]
    assert actions(out) == [Action.APPLY] * 3


def test_offsets_at_or_below_the_watermark_are_replays():
    view = PartitionView(5, frozenset(), frozenset())
    assert actions(decide(view, [rec(4), rec(5), rec(6)])) == [
        Action.SKIP_REPLAY,
        Action.SKIP_REPLAY,
        Action.APPLY,
    ]


def test_resent_event_ids_are_skipped_from_the_window_and_within_the_batch():
    view = PartitionView(10, frozenset({"a"}), frozenset())
    out = decide(view, [rec(11, event_id="a"), rec(12, event_id="b"), rec(13, event_id="b")])
    assert actions(out) == [Action.SKIP_DUPLICATE, Action.APPLY, Action.SKIP_DUPLICATE]


def test_undecodable_and_unknown_types_are_parked_and_hold_their_key_only():
    out = decide(
        EMPTY,
        [
            rec(0, key="x", decode_error="value is not JSON"),
            rec(1, key="x"),
            rec(2, key="y"),
            rec(3, key="z", event_type="Nope"),
            rec(4, key="z"),
        ],
        known_types={"T"},
    )
    assert actions(out) == [Action.PARK, Action.HOLD, Action.APPLY, Action.PARK, Action.HOLD]
    assert "not JSON" in out[0].reason and "'Nope'" in out[3].reason


def test_keys_parked_earlier_hold_new_records():
    view = PartitionView(3, frozenset(), frozenset({"x"}))
    assert actions(decide(view, [rec(4, key="x"), rec(5, key="y")])) == [Action.HOLD, Action.APPLY]


def test_prune_floor_keeps_exactly_the_window():
    assert prune_floor(watermark=99, window=10) == 90


@given(
    st.lists(st.tuples(st.integers(0, 40), st.sampled_from("abcdef")), max_size=60),
    st.integers(-1, 20),
)
def test_each_event_id_is_applied_at_most_once_and_never_at_or_below_the_watermark(pairs, wm):
    records = [rec(offset, event_id=eid) for offset, eid in {o: e for o, e in pairs}.items()]
    out = decide(PartitionView(wm, frozenset(), frozenset()), records)
    by_offset = {r.offset: r for r in records}
    applied = [by_offset[d.offset].event_id for d in out if d.action is Action.APPLY]
    assert len(applied) == len(set(applied))
    assert all(d.offset > wm for d in out if d.action is Action.APPLY)
    assert len(out) == len(records)


def test_a_handler_failure_reported_to_the_decider_holds_later_records_of_that_key():
    decider = Decider(EMPTY)
    first = rec(0, key="x")
    assert decider.decide(first).action is Action.APPLY
    decider.parked(first)  # its handler kept failing
    assert decider.decide(rec(1, key="x")).action is Action.HOLD
    assert decider.decide(rec(2, key="y")).action is Action.APPLY
    # The failed event's id is not "applied": a re-send of it is held, not skipped.
    assert decider.decide(rec(3, key="x", event_id="e0")).action is Action.HOLD
