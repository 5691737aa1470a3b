"""The one lag rule both the service's and the consumer driver's metrics report."""

from __future__ import annotations

import pytest

from inbox.lag import PartitionLag


@pytest.mark.parametrize(
    ("watermark", "bounds", "lag"),
    [
        (None, None, None),  # Kafka did not answer: no figure rather than a wrong one
        (9, None, None),
        (9, (0, 10), 0),  # everything up to the end applied
        (4, (0, 10), 5),  # offsets 5..9 wait
        (None, (0, 10), 10),  # nothing applied: all of the partition waits
        (None, (6, 10), 4),  # retention deleted 0..5: count from the first offset there is
        (10, (0, 10), 0),  # a commit marker after the watermark's event never makes it negative
    ],
)
def test_lag_counts_from_the_next_offset_to_apply_up_to_the_end(
    watermark: int | None, bounds: tuple[int, int] | None, lag: int | None
) -> None:
    assert PartitionLag("c", "t", 0, watermark, bounds).lag == lag


def test_both_processes_use_the_one_rule() -> None:
    from service_template import metrics as service
    from spark_consumers.metrics import tables as driver

    for module in (service, driver):
        assert module.read_lags.__module__ == "inbox.lag"
    state = driver.PartitionState("job", "c", "t", 0, 4, (0, 10))
    assert state.lag == PartitionLag("c", "t", 0, 4, (0, 10)).lag == 5
