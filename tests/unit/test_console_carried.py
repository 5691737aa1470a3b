"""A failure group's cause travels through the redrive form base64-encoded: a browser rewrites
a carriage return (and a lone line feed) in a form value, and the group could not be found."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from outboxkit.console.actions import ActionRefused
from outboxkit.console.site import carried, uncarried


@given(st.text())
def test_any_cause_arrives_byte_for_byte(cause: str) -> None:
    sent = carried(cause)
    assert sent.isascii() and "\r" not in sent and "\n" not in sent and '"' not in sent
    assert uncarried(sent) == cause


@pytest.mark.parametrize("cause", ["handler failed: X\r", "a\r\nb", "a\nb", "ünïcode 🚀"])
def test_line_breaks_and_text_round_trip(cause: str) -> None:
    assert uncarried(carried(cause)) == cause


@pytest.mark.parametrize("tampered", ["***", "é", "gA=="])
def test_a_value_that_did_not_arrive_intact_is_refused(tampered: str) -> None:
    with pytest.raises(ActionRefused, match="did not arrive intact"):
        uncarried(tampered)
