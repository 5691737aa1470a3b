"""Where the read_committed scan's reader stands against a partition's offsets (pure)."""

from __future__ import annotations

import pytest

from outboxkit_workshop.saga_harness.kafka_scan import short

INVALID = -1001  # librdkafka's position before anything is read


@pytest.mark.parametrize(
    ("position", "low", "high", "expected"),
    [
        (INVALID, 0, 0, False),  # an empty partition
        (INVALID, 7, 7, False),  # every record deleted by retention
        (INVALID, 0, 5, True),  # records, none read yet
        (3, 0, 5, True),  # records left (or held back by an open transaction)
        (5, 0, 5, False),  # read to the high watermark, markers included
        (2, 4, 4, False),  # behind a start that retention moved past the end
    ],
)
def test_a_reader_is_short_of_the_end_only_when_records_are_left(position, low, high, expected):
    assert short(position, low, high) is expected
