"""The inbox's rules when offsets change meaning (a re-created topic, a mirrored cluster, a
re-send landing anywhere): judged by source position when records carry one, stopped, never
skipped in silence, when they do not. Every move composed: `test_inbox_model`."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inbox.decision import Action, Decider, Incoming, PartitionView
from inbox.judgement import SourceState, advanced, first, new_history
from inbox.position import OffsetsMoved, TopicIdentity, judge_identity, source_keys
from inbox.stops import stopped_source
from outboxkit.kernel.wire import position as position_module
from outboxkit.kernel.wire.position import parse_position, source_position

A = TopicIdentity("cluster-1", "topic-a")
B = TopicIdentity("cluster-1", "topic-b")  # the same name re-created
MIRROR = TopicIdentity("cluster-2", "topic-m")


def view(watermark=-1, positions=None, held=None, recent=(), by_position=False, ids_kept=False):
    sources = {k: SourceState(p) for k, p in (positions or {}).items()}
    return PartitionView(
        watermark, frozenset(recent), frozenset(), sources, held or {}, by_position, ids_kept
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
    assert source_position([("sourceName", b"orders")]) == ("orders", None)
    assert source_position([("sourcePosition", b'["5","7"]')]) == (None, None)


_DIGITS = st.text(alphabet="0123456789\u00b2\u0663x ", max_size=22)


@settings(max_examples=500)
@given(
    st.one_of(
        st.text(max_size=40),
        st.builds(lambda a, b: f'["{a}","{b}"]', _DIGITS, _DIGITS),
        st.builds(
            lambda a, b, c: f'[{a}"{b}"{c}]',
            st.sampled_from(["", " ", '"1",']),
            _DIGITS,
            st.sampled_from(["", " ", ',"2"']),
        ),
    )
)
def test_positions_parse_as_the_sequence_pattern_says(text: str) -> None:
    """The common shape's fast path reads exactly what the pattern reads (ASCII digits only,
    at most 20 each, nothing around them)."""
    found = position_module._SEQUENCE.fullmatch(text)
    expected = None
    if found is not None and None not in found.groups():
        expected = (int(found[1]), int(found[2]))
    assert parse_position(text) == expected


def test_a_new_event_at_an_applied_offset_applies_when_its_position_is_new():
    decider = Decider(view(watermark=9, positions={"db": (100, 100)}))
    assert decider.decide(rec(3, "new", (120, 120))).action is Action.APPLY
    assert decider.decide(rec(4, "old", (90, 90))).action is Action.SKIP_REPLAY
    # above the watermark, the top's own event is a re-send, another one at it a tie
    assert decider.decide(rec(10, "new", (120, 120))).action is Action.SKIP_DUPLICATE
    assert decider.decide(rec(11, "tie", (120, 120))).action is Action.APPLY


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


def test_the_top_s_ids_tell_a_re_send_of_the_top_from_another_row_of_its_write():
    state = SourceState((100, 100), frozenset({"e1"}))
    decider = Decider(PartitionView(9, frozenset(), frozenset(), {"db": state}, ids_kept=True))
    assert decider.decide(rec(10, "e1", (100, 100))).action is Action.SKIP_DUPLICATE
    assert decider.decide(rec(11, "e2", (100, 100))).action is Action.APPLY  # a tie
    assert decider.decide(rec(12, "e2", (100, 100))).action is Action.SKIP_DUPLICATE


def test_below_the_top_nothing_proving_it_decided_stops_with_the_source_named():
    decider = Decider(view(watermark=9, positions={"db": (100, 100)}, ids_kept=True))
    stop = decider.decide(rec(10, "x", (90, 90)))
    assert stop.action is Action.STOP and stopped_source(stop.reason) == "db"


def test_a_new_history_skips_up_to_its_fork_and_applies_after_it():
    """Up to the fork, re-reads; above it, new. Once a new event is taken, a record below the
    fork is no longer proved a re-read by the fork alone (a later restore may write there): it
    stops the partition unless its id is known."""
    decider = Decider(
        PartitionView(9, frozenset(), frozenset(), {"db": new_history(95)}, ids_kept=True)
    )
    assert decider.decide(rec(10, "old", (95, 97))).action is Action.SKIP_DUPLICATE
    assert decider.decide(rec(11, "new", (96, 96))).action is Action.APPLY
    assert decider.decide(rec(12, "new", (96, 96))).action is Action.SKIP_DUPLICATE
    assert decider.decide(rec(13, "late", (94, 94))).action is Action.STOP


def test_a_renamed_source_keeps_its_key_by_its_database_identity():
    keys, identities = source_keys([("db", "sys/app"), ("db2", "sys/app")], {})
    assert keys == ["db", "db"] and identities == {"db": "sys/app"}
    keys, identities = source_keys([("db", "other/app")], identities)
    assert keys == ["db@other/app"] and identities["db@other/app"] == "other/app"


def _move(stopped, positions=None):
    from inbox.moves import Move

    return Move("c", "t", 0, 9, A, A, positions or {"db": (5, 5)}, stopped)


def test_each_stop_has_its_paths_and_refuses_the_others():
    from inbox.stops import unclaimed, went_back
    from inbox.transitions import Rebase, refusal

    back = _move(went_back("db", (3, 3), (5, 5), "e"))
    assert "--new-history" in refusal(back, Rebase())
    assert refusal(back, Rebase(resends=True)) is None
    assert refusal(back, Rebase(histories={"db": 4})) is None
    assert "knows no source" in refusal(back, Rebase(histories={"other": 4}))
    claim = _move(unclaimed("db", "7/x"))
    assert "--source-identity" in refusal(claim, Rebase())
    assert refusal(claim, Rebase(claims={"db": "7/x"})) is None
    assert "resume only such a stop" in refusal(claim, Rebase(resends=True))
    moved = _move("topic id t1 became t2")
    assert refusal(moved, Rebase()) is None
    assert "resume only such a stop" in refusal(moved, Rebase(histories={"db": 4}))


def test_an_lsn_is_read_as_postgres_writes_it_or_as_a_number():
    from inbox.transitions import parse_lsn

    assert parse_lsn("16/B374D848") == (0x16 << 32) + 0xB374D848
    assert parse_lsn("42") == 42
    with pytest.raises(ValueError, match="not an LSN"):
        parse_lsn("x/y")


_POS = st.tuples(st.integers(0, 5), st.integers(0, 5))
_IDS = st.sampled_from(["e1", "e2", "e3"])


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["a", "b"]),
        st.builds(SourceState, _POS, st.frozensets(_IDS), st.none() | _POS),
    ),
    st.lists(st.tuples(st.sampled_from(["a", "b", None]), st.none() | _POS, st.none() | _IDS)),
)
def test_a_slice_taken_in_at_once_is_each_record_taken_in_turn(states, records):
    slow = dict(states)
    for source, position, event_id in records:
        if source is not None:
            known = slow.get(source)
            slow[source] = (
                first(position, event_id) if known is None else known.taken(position, event_id)
            )
    assert advanced(states, records) == slow


def test_a_replay_of_the_top_event_at_its_offset_counts_as_a_replay():
    state = SourceState((100, 100), frozenset({"e1"}))
    decider = Decider(PartitionView(9, frozenset(), frozenset(), {"db": state}, ids_kept=True))
    assert decider.decide(rec(9, "e1", (100, 100))).action is Action.SKIP_REPLAY
    assert decider.decide(rec(10, "e1", (100, 100))).action is Action.SKIP_DUPLICATE
