"""Scheduled messages' pure parts: the schedule's arguments, the releaser's pace, and the CLI's
defaults (named there so that --help stays quick) equal to the module's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from outbox import scheduled
from outbox.settings import ReleaseSettings
from outboxkit.cli import build_parser
from outboxkit.kernel.errors import InvalidEvent


def test_due_of_takes_exactly_one_time_and_checks_it():
    at = datetime(2030, 1, 1, tzinfo=UTC)
    assert scheduled.due_of(at, None, "k") == scheduled.Due(at, None, "k")
    assert scheduled.due_of(None, timedelta(minutes=2)).delay == 120.0
    assert scheduled.due_of(None, 0).delay == 0.0
    for at_, delay, key in [
        (None, None, None),
        (at, 1.0, None),
        (datetime(2030, 1, 1), None, None),
        (None, -0.5, None),
        (None, float("inf"), None),
        (None, 1.0, ""),
        (None, 1.0, "k" * 256),
    ]:
        with pytest.raises(InvalidEvent):
            scheduled.due_of(at_, delay, key)


def releaser(**options) -> scheduled.Releaser:
    return scheduled.Releaser(None, lambda session, rows: None, **options)  # type: ignore[arg-type]


def test_the_releaser_sleeps_until_the_next_due_at_most_a_poll_and_paces_a_backlog():
    r = releaser(limit=100, max_rate=1000.0, poll=0.2)
    assert r._pause(scheduled.Released(count=3, next_due=None), 0.01) == 0.2
    assert r._pause(scheduled.Released(count=0, next_due=0.05), 0.01) == 0.05
    assert r._pause(scheduled.Released(count=0, next_due=-3.0), 0.01) == 0.0  # due already
    assert r._pause(scheduled.Released(count=0, next_due=3600.0), 0.01) == 0.2
    # a full batch: the next at once, but no faster than max_rate (100 per 0.1 s)
    assert r._pause(scheduled.Released(count=100), 0.02) == pytest.approx(0.08)
    assert r._pause(scheduled.Released(count=100), 0.5) == 0.0
    with pytest.raises(ValueError):
        releaser(limit=0)


def test_the_cli_and_the_settings_default_to_the_modules_values():
    parser = build_parser()
    args = parser.parse_args(["outbox", "release"])
    assert (args.batch, args.max_rate, args.poll_seconds, args.mode) == (
        scheduled.DEFAULT_LIMIT,
        scheduled.DEFAULT_MAX_RATE,
        scheduled.DEFAULT_POLL_SECONDS,
        "delete",
    )
    settings = ReleaseSettings()
    assert (settings.batch, settings.max_rate, settings.poll_seconds) == (
        scheduled.DEFAULT_LIMIT,
        scheduled.DEFAULT_MAX_RATE,
        scheduled.DEFAULT_POLL_SECONDS,
    )
    assert ReleaseSettings(enabled=False).releaser(None, None) is None  # type: ignore[arg-type]
