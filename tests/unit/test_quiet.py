"""The quiet spell after a failure (`outboxkit.kernel.quiet.Quiet`), on a clock of the test's."""

from __future__ import annotations

from outboxkit.kernel.quiet import Quiet


def test_a_failure_starts_a_spell_that_ends_in_time_or_when_answered() -> None:
    now = [100.0]
    quiet = Quiet(15.0, clock=lambda: now[0])
    assert quiet.silence() is None and quiet.why is None
    quiet.failed("Connection refused")
    now[0] += 5
    silence = quiet.silence()
    assert silence is not None
    assert (silence.age, silence.left, silence.why) == (5.0, 10.0, "Connection refused")
    now[0] += 10
    assert quiet.silence() is None  # over: asked again
    assert quiet.why == "Connection refused"  # until it answers
    quiet.failed("timed out")
    quiet.answered()
    assert quiet.silence() is None and quiet.why is None
