"""The console's overview is read in the background once it is stale: a look never waits for
Kafka, Connect or a database but the very first (`OverviewReader`)."""

from __future__ import annotations

import threading
import time

from outboxkit.console.overview import OverviewReader


class SlowConnect:
    """A Connect that answers only when ``gate`` is open; counts the asks."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.asked = 0

    def __call__(self) -> SlowConnect:
        return self

    def connectors(self) -> list[str]:
        self.asked += 1
        assert self.gate.wait(10)
        return []


def test_a_look_at_a_stale_overview_gets_it_at_once_and_starts_one_read() -> None:
    connect = SlowConnect()
    reader = OverviewReader([], {}, connect, fresh=0.05)
    connect.gate.set()
    first = reader.read()  # the first look waits for its read
    assert connect.asked == 1
    connect.gate.clear()  # Connect now slow
    time.sleep(0.1)
    started = time.monotonic()
    assert reader.read() is first  # stale: answered at once, a read started
    assert reader.read() is first  # one read at a time
    assert time.monotonic() - started < 0.5
    deadline = time.monotonic() + 5
    while connect.asked < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert connect.asked == 2
    connect.gate.set()
    while reader.read() is first and time.monotonic() < deadline:
        time.sleep(0.01)
    newer = reader.read()
    assert newer is not first and newer.read_at > first.read_at
    assert connect.asked == 2


def test_with_fresh_zero_every_look_reads() -> None:
    connect = SlowConnect()
    connect.gate.set()
    reader = OverviewReader([], {}, connect, fresh=0.0)
    reader.read()
    reader.read()
    assert connect.asked == 2
