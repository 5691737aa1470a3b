"""What the machine and this run used around a measurement: load averages, the CPUs' busy
share and this run's part of it (from /proc), and the stack's processes and their memory."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from outboxkit_workshop.devstack.stack import Stack


@dataclass
class Watch:
    """The machine's load around a measurement: load averages before and after, the share of
    all CPUs busy during it (/proc/stat: whatever ran), and the share this run's own processes
    used (this process and its descendants: the stack, the drivers, executors, services)."""

    before: tuple[float, float, float] = (0.0, 0.0, 0.0)
    after: tuple[float, float, float] = (0.0, 0.0, 0.0)
    busy: float = float("nan")
    own: float = float("nan")
    seconds: float = 0.0
    _start: tuple[float, float, float, float] = field(default=(0, 0, 0, 0), repr=False)

    def __enter__(self) -> Watch:
        self.before = os.getloadavg()
        self._start = (time.perf_counter(), *cpu_ticks(), own_ticks())
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        (busy, total), own = cpu_ticks(), own_ticks()
        self.after = os.getloadavg()
        started, busy_0, total_0, own_0 = self._start
        self.seconds = time.perf_counter() - started
        if total > total_0:
            self.busy = (busy - busy_0) / (total - total_0)
            self.own = min(self.busy, (own - own_0) / (total - total_0))

    def as_dict(self) -> dict[str, Any]:
        return {
            "loadavg_before": self.before,
            "loadavg_after": self.after,
            "cpu_busy_share": self.busy,
            "cpu_share_of_this_run": self.own,
            "seconds": self.seconds,
        }


def cpu_ticks() -> tuple[float, float]:
    """(busy, total) clock ticks of all CPUs since boot, from /proc/stat's first line; (0, 0)
    where there is no /proc/stat."""
    try:
        first = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return 0.0, 0.0
    user, nice, system, idle, iowait, irq, softirq, steal = (float(x) for x in first[1:9])
    total = user + nice + system + idle + iowait + irq + softirq + steal
    return total - idle - iowait, total


def own_ticks(root: int | None = None) -> float:
    """Clock ticks used by ``root`` (default: this process) and its live descendants, with
    their reaped children's: the CPU this run took, whatever else runs on the machine."""
    parents: dict[int, int] = {}
    ticks: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        fields = stat.rsplit(")", 1)[1].split()  # after the command name, which may hold ") "
        pid = int(entry.name)
        parents[pid] = int(fields[1])
        ticks[pid] = sum(float(x) for x in fields[11:15])  # utime stime cutime cstime
    mine = {root or os.getpid()}
    grown = True
    while grown:
        before = len(mine)
        mine |= {pid for pid, parent in parents.items() if parent in mine}
        grown = len(mine) > before
    return sum(ticks.get(pid, 0.0) for pid in mine)


def stack_nodes(stack: Stack) -> list[int]:
    """PIDs of the stack's own processes (postmaster, Kafka nodes, Connect workers, Spark
    master and workers; not Postgres backends, Spark executors or drivers)."""
    state = stack.state
    engines = (state.postgres, state.broker, state.connect, state.spark)
    return [n.pid for engine in engines for n in engine.nodes if n.pid]


def rss_mib(pids: Sequence[int]) -> float:
    """Resident memory of ``pids`` (MiB, from /proc/<pid>/status)."""
    kib = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    kib += int(line.split()[1])
    return kib / 1024
