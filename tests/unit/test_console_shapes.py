"""What the console shapes from what it read (pure): a failure group's kind, the rate between
samples, the plot and durations."""

from __future__ import annotations

import pytest

from outboxkit.console.shapes import HOUR, Sample, Samples, ago, cause_kind, plot


@pytest.mark.parametrize(
    ("cause", "kind"),
    [
        ("handler failed: ValueError: cannot charge order <n>", "ValueError"),
        (
            "retries exhausted after <n> delayed retries: handler failed: TimeoutError: x",
            "TimeoutError",
        ),
        ("handler failed: psycopg.errors.UniqueViolation: duplicate key", "UniqueViolation"),
        ("a message naming no exception", "other"),
        ("held behind a parked record of key <key>", "held behind a parked record of its key"),
        ("undecodable: the value is not JSON", "undecodable record"),
        ("unknown event type <text>", "unknown event type"),
        ("the payload check failed: ValidationError: amount", "ValidationError"),
        ("invalid payload: amount must be positive", "invalid payload"),
        (None, "other"),
    ],
)
def test_a_group_is_named_by_its_exception_else_by_its_refusal(
    cause: str | None, kind: str
) -> None:
    assert cause_kind(cause) == kind


def test_the_rate_is_offsets_per_second_over_the_last_samples() -> None:
    samples = Samples(keep=HOUR)
    assert samples.rate() is None
    samples.add(Sample(0.0, 100, 5))
    assert samples.rate() is None  # one sample: no rate
    samples.add(Sample(10.0, 150, 0))
    assert samples.rate() == 5.0
    samples.add(Sample(40.0, 450, 0))
    assert samples.rate(over=30.0) == 10.0  # from the sample 30 s before the newest
    assert samples.rates() == [(10.0, 5.0), (40.0, 10.0)]
    samples.add(Sample(40.0 + HOUR + 1, 450, 0))  # an hour later: the old ones are forgotten
    assert [s.at for s in samples] == [40.0 + HOUR + 1]


def test_a_watermark_moved_back_is_no_negative_rate() -> None:
    samples = Samples()
    samples.add(Sample(0.0, 500, 0))
    samples.add(Sample(5.0, 100, 400))  # rewound
    assert samples.rate() == 0.0


def test_the_plot_draws_each_series_and_names_it_for_screen_readers() -> None:
    svg = plot(
        [("lag (records)", [(100.0, 10.0), (200.0, 30.0)]), ("applied", [])],
        now=200.0,
        title="payments",
    )
    assert svg.count("<polyline") == 1
    assert 'role="img"' in svg and "lag (records), up to 30" in svg and "applied: none known" in svg
    old = plot([("lag", [(0.0, 99.0)])], now=HOUR + 10, title="t")
    assert "<polyline" not in old  # older than an hour: not drawn


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(None, "—"), (-3, "0 s"), (4.2, "4 s"), (150, "2 min"), (7500, "2 h 5 min")],
)
def test_durations_read_as_people_say_them(seconds: float | None, text: str) -> None:
    assert ago(seconds) == text


def test_a_partition_with_only_a_commit_marker_left_does_not_lag() -> None:
    from datetime import UTC, datetime

    from outboxkit.console.overview import _partition
    from outboxkit.console.reads import PartitionRow

    row = PartitionRow("t", 0, 21, datetime.now(UTC), None)
    marker_only = _partition(row, (0, 23), {("t", 0): None}, now=100.0)
    assert (marker_only.lag, marker_only.waited) == (0, 0.0)
    waiting = _partition(row, (0, 25), {("t", 0): 40.0}, now=100.0)
    assert (waiting.lag, waiting.waited) == (3, 60.0)
    unread = _partition(row, (0, 25), {}, now=100.0)  # Kafka gave no head within the budget
    assert (unread.lag, unread.waited) == (3, None)
    no_kafka = _partition(row, None, {}, now=100.0)
    assert (no_kafka.lag, no_kafka.end) == (None, None)
    trimmed = _partition(PartitionRow("t", 0, -1, row.updated_at, None), (10, 12), {}, now=1.0)
    assert trimmed.lag == 2  # retention deleted offsets below 10: counted from the first
