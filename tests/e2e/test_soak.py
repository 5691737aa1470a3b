"""`outboxkit dev soak` in short, on the package's saga: 42 s at 4 orders/s with one routine
fault (Connect's tasks restarted) after 30 s, ridden out by the same processes, and a sample
every 2 s."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from outboxkit_workshop.commands.soak import plot
from outboxkit_workshop.devstack.processes import alive
from outboxkit_workshop.saga_harness import soak
from outboxkit_workshop.saga_harness.processes import Saga


def test_a_short_soak_samples_every_process_and_keeps_every_invariant(saga: Saga, stack, tmp_path):
    pids = dict(saga.pids)
    result = soak.run(
        stack,
        saga,
        minutes=0.7,
        rate=4,
        fault_every=0.5,
        sample_seconds=2,
        seed=3,
        kinds=["connect-task-restart"],
        cpu_settle_seconds=0,  # the processes are seconds old: judged from the start
    )
    print({t.series: (t.first, t.last, t.verdict) for t in result.trends})
    assert [r.fault for r in result.faults] == ["connect-task-restart"]
    assert result.checks.ok, result.checks.problems
    assert (result.checks.stuck, result.checks.lost, result.checks.duplicates) == (0, 0, 0)
    # Nobody restarted anything: the same processes throughout, every one still running.
    assert saga.pids == pids and all(alive(pid) for pid in pids.values())
    log = (saga.workdir / "consumers.log").read_text(errors="replace")
    assert "StackOverflowError" not in log
    assert all(a["totals"]["applied"] > 0 for a in result.checks.audits)
    assert len(result.times) >= 18  # 42 s at one sample every 2 s
    processes = [*(n.name for n in stack.state.postgres.nodes), *saga.processes]
    processes += [n.name for n in (*stack.state.broker.nodes, *stack.state.connect.nodes)]
    data = result.as_dict()
    for name in processes:
        for family in ("rss", "fds", "threads"):
            values = data["series"][f"{family}:{name}"]
            assert sum(v is not None for v in values) >= len(result.times) - 2, (name, family)
    # Postgres's shared buffers apart from its private memory, bounded by its shared memory
    # area (where the kernel reports Pss_Shmem).
    if "Pss_Shmem" in Path("/proc/self/smaps_rollup").read_text():
        postgres = f"shared:{stack.state.postgres.nodes[0].name}"
        assert max(v for v in data["series"][postgres] if v is not None) > 0
        assert next(t for t in result.trends if t.series == postgres).bound is not None
    consumers = data["series"]["threads:consumers"]
    assert min(v for v in consumers if v is not None) > 20  # the driver's JVM counted with it
    # CPU from the second sample on (a share since the one before), for every process: the
    # consumers' JVM and Python workers run micro-batches all along, well above an idle tree.
    for name in processes:
        values = data["series"][f"cpu:{name}"]
        assert values[0] is None and sum(v is not None for v in values) >= len(result.times) - 3
    cpu = [v for v in data["series"]["cpu:consumers"] if v is not None]
    assert statistics.median(cpu) > 5, cpu
    assert data["series"]["orders:placed"][-1] >= 4 * 42
    files = soak_files(tmp_path, data)
    assert json.loads(files["soak.json"].read_text())["checks"]["ok"] is True
    assert all(path.stat().st_size > 0 for path in files.values())


def soak_files(folder, data):
    """What `outboxkit dev soak --out` writes, from ``data``."""
    from outboxkit_workshop.bench.figures import soak as soak_markdown
    from outboxkit_workshop.bench.report import write

    data = {**data, "machine": {"cpus": 2, "platform": "Linux", "python": "3"}}
    written = [*write(folder, "soak", data, soak_markdown(data)), plot(folder / "soak.png", data)]
    return {path.name: path for path in written}
