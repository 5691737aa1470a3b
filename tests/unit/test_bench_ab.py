"""The before/after alternation of the benchmarks' A/B scripts (`outboxkit_workshop.bench.ab`)."""

from __future__ import annotations

import sys
from pathlib import Path

from outboxkit_workshop.bench.ab import alternate, in_checkout


def test_each_round_measures_both_and_the_order_swaps_every_other_round():
    calls: list[str] = []
    seen: list[tuple[int, str, int]] = []

    def measure(label: str) -> int:
        calls.append(label)
        return len(calls)

    found = alternate(3, measure, shown=lambda r, label, value: seen.append((r, label, value)))
    assert calls == ["before", "after", "after", "before", "before", "after"]
    assert found == {"before": [1, 4, 5], "after": [2, 3, 6]}
    assert seen[:3] == [(1, "before", 1), (1, "after", 2), (2, "after", 3)]


def test_code_runs_in_the_checkout_and_its_last_line_is_read_as_json(tmp_path: Path):
    (tmp_path / "probe_module.py").write_text("WHERE = 'the checkout'\n")
    code = (
        "import json, sys, probe_module; print('noise');"
        " print(json.dumps([probe_module.WHERE, sys.argv[1:], sys.executable]))"
    )
    found = in_checkout(tmp_path, code, "a", "b")
    assert found == ["the checkout", ["a", "b"], sys.executable]  # this interpreter, there
