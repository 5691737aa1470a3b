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


def test_report_gives_both_routes_and_their_ratio_per_client_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    found: dict[str, Any] = {"cpus": 2, "platform": "linux", "python": "3.11"}
    monkeypatch.setattr(service, "machine", lambda url: found)
    stack = SimpleNamespace(database_url=lambda: "postgresql://x")

    def runs(*pairs: tuple[float, float]) -> list[dict[str, float]]:
        return [{"posts_per_second": r, "cpu_ms_per_post": c, "unavailable": 0} for r, c in pairs]

    rounds = {
        "async": {1: runs((100, 4.0), (120, 5.0)), 16: runs((300.0, 3.5))},
        "sync": {1: runs((50, 8.0), (60, 10.0)), 16: runs((300.0, 3.5))},
    }
    data, markdown = service._report(stack, rounds, 2, 600, None)  # type: ignore[arg-type]
    assert "| 1 | async | 100 | 110 | 120 | 4.00 | 4.50 | 5.00 |" in markdown
    assert "| 1 | sync | 50 | 55 | 60 | 8.00 | 9.00 | 10.00 |" in markdown
    assert "| 1 | 2.00 | 0.50 |" in markdown and "| 16 | 1.00 | 1.00 |" in markdown
    assert data["variants"]["sync"]["16"] == rounds["sync"][16] and data["clients"] == [1, 16]
    assert data["async_over_sync"]["1"] == {"posts_per_second": 2.0, "cpu_ms_per_post": 0.5}
    assert data["plots"] == [] and "Flame graph" not in markdown and "503" not in markdown
