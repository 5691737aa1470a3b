"""The service benchmark's pure parts: the process CPU reading and the report's table."""

from __future__ import annotations

import os
import time
from types import SimpleNamespace
from typing import Any

import pytest

from outboxkit_workshop.bench import service


def test_process_cpu_seconds_grows_with_work() -> None:
    before = service.process_cpu_seconds(os.getpid())
    end = time.process_time() + 0.05
    while time.process_time() < end:
        pass
    assert service.process_cpu_seconds(os.getpid()) >= before + 0.03


def test_report_gives_min_median_max_per_client_count(monkeypatch: pytest.MonkeyPatch) -> None:
    found: dict[str, Any] = {"cpus": 2, "platform": "linux", "python": "3.11"}
    monkeypatch.setattr(service, "machine", lambda url: found)
    stack = SimpleNamespace(database_url=lambda: "postgresql://x")
    rounds = {
        1: [{"posts_per_second": r, "cpu_ms_per_post": c} for r, c in ((100, 4.0), (120, 5.0))],
        8: [{"posts_per_second": 300.0, "cpu_ms_per_post": 3.5}],
    }
    data, markdown = service._report(stack, rounds, 2, 600, None)  # type: ignore[arg-type]
    assert "| 1 | 100 | 110 | 120 | 4.00 | 4.50 | 5.00 |" in markdown
    assert "| 8 | 300 | 300 | 300 | 3.50 | 3.50 | 3.50 |" in markdown
    assert data["rounds"]["8"] == rounds[8] and data["plots"] == []
    assert "Flame graph" not in markdown
