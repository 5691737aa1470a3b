"""Floors before partitions are added: raised only for the sources whose connector was paused.

Another source's connector kept publishing while the consumers drained, so one partition may
hold its events below the position another partition applied; raising its floor there would
skip them in silence."""

from __future__ import annotations

from inbox.judgement import SourceState, raised
from inbox.moves import raised_rows


def test_only_the_paused_source_gets_a_floor_with_the_ids_at_its_top() -> None:
    rows = [
        {"shop": SourceState((30, 30), frozenset({"a"})), "billing": SourceState((50, 50))},
        {"shop": SourceState((30, 30), frozenset({"b"})), "billing": SourceState((20, 20))},
    ]
    assert raised(rows, ["shop"]) == {"shop": SourceState((30, 30), frozenset("ab"), (30, 30))}
    assert set(raised(rows, ["shop", "billing"])) == {"shop", "billing"}
    assert raised(rows, ["gone"]) == {}


def test_a_paused_database_is_raised_alone_and_by_its_own_positions() -> None:
    a, b = "7001/shop", "7002/shop"
    rows = [
        ({"shop": SourceState((90, 90)), "shop@" + b: SourceState((40, 40))}, {"shop": a}),
        ({"shop": SourceState((50, 50)), "shop@" + a: SourceState((95, 95))}, {"shop": b}),
    ]
    after = raised_rows(rows, ["shop"], [a], 1)
    assert after[0][0]["shop"].floor == (95, 95)  # A, by its own positions in partition 1
    assert after[1][0]["shop"] == SourceState((50, 50))  # B still publishes: left alone
    assert after[1][0]["shop@" + a].floor == (95, 95)
    new_states, new_identities = after[2]
    assert {new_identities[k]: s.top for k, s in new_states.items()} == {a: (95, 95)}


def test_positions_stored_without_identity_never_land_on_a_database_s_key() -> None:
    c = "7003/shop"
    rows = [
        ({"shop": SourceState((9000, 9000))}, {}),
        ({"shop": SourceState((10, 10))}, {"shop": c}),
    ]
    after = raised_rows(rows, ["shop"], [], 0)
    assert after[0][0]["shop"] == SourceState((9000, 9000), floor=(9000, 9000))
    assert after[0][1] == {"shop@" + c: c}  # C gets a key of its own where the name is taken
    assert after[1][0]["shop"] == SourceState((10, 10), floor=(10, 10))  # C's own only
