"""Floors before partitions are added: raised only for the sources whose connector was paused.

Another source's connector kept publishing while the consumers drained, so one partition may
hold its events below the position another partition applied; raising its floor there would
skip them in silence."""

from __future__ import annotations

from inbox.judgement import SourceState, raised
from inbox.moves import paused


def test_only_the_paused_source_gets_a_floor_with_the_ids_at_its_top() -> None:
    rows = [
        {"shop": SourceState((30, 30), frozenset({"a"})), "billing": SourceState((50, 50))},
        {"shop": SourceState((30, 30), frozenset({"b"})), "billing": SourceState((20, 20))},
    ]
    assert raised(rows, ["shop"]) == {"shop": SourceState((30, 30), frozenset("ab"), (30, 30))}
    assert set(raised(rows, ["shop", "billing"])) == {"shop", "billing"}
    assert raised(rows, ["gone"]) == {}


def test_a_renamed_source_is_paused_by_its_name_or_its_database_identity() -> None:
    identities = {"shop": "sys/app", "shop@other/app": "other/app"}
    assert paused("shop", identities, ["shop"]) and paused("shop@other/app", identities, ["shop"])
    assert paused("shop", identities, ["shop2", "sys/app"])
    assert not paused("shop@other/app", identities, ["shop2", "sys/app"])
