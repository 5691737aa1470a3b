"""Floors before partitions are added: raised only for the sources whose connector was paused.

Another source's connector kept publishing while the consumers drained, so one partition may
hold its events below the position another partition applied; raising its floor there would
skip them in silence."""

from __future__ import annotations

from inbox.moves import floors


def test_only_the_paused_source_gets_a_floor() -> None:
    rows = [
        {"shop": (10, 10), "billing": (50, 50)},  # partition 0
        {"shop": (30, 30), "billing": (20, 20)},  # partition 1: billing's 21..50 may be here
    ]
    assert floors(rows, ["shop"]) == {"shop": (30, 30)}
    assert floors(rows, ["shop", "billing"]) == {"shop": (30, 30), "billing": (50, 50)}
    assert floors(rows, ["gone"]) == {}
