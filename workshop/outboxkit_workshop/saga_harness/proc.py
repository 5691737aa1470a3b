"""What a process tree and a folder use, read from /proc and the file system directly: resident
memory, open file descriptors, threads and CPU time of a process with all its descendants (a
Spark driver's JVM and Python workers, Postgres's backends), and a folder's bytes and files."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class Usage:
    """What a process tree holds: resident memory (MiB, proportional: see `status`) and the part
    of it in shared memory, open file descriptors, threads, and how many processes it counts."""

    rss_mib: float
    fds: int
    threads: int
    processes: int
    shared_mib: float | None = None  # None: the kernel does not say (no Pss_Shmem)

    @property
    def private_mib(self) -> float:
        """Resident memory outside shared memory: what a leak in a process grows (all of it
        where the kernel does not tell shared memory apart)."""
        return self.rss_mib - (self.shared_mib or 0.0)


def parents(proc: Path = PROC) -> dict[int, int]:
    """Every process's parent PID (/proc/PID/stat), by PID; processes gone meanwhile left out."""
    found: dict[int, int] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name (field 2) may hold spaces and parentheses: fields follow the last ')'.
        fields = stat[stat.rindex(")") + 2 :].split()
        found[int(entry.name)] = int(fields[1])
    return found


def tree(pid: int, parent_of: Mapping[int, int]) -> list[int]:
    """``pid`` and all its descendants (by ``parent_of``, from `parents`), ``pid`` first."""
    children: dict[int, list[int]] = {}
    for child, parent in parent_of.items():
        children.setdefault(parent, []).append(child)
    found, todo = [pid], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _fields(path: Path) -> dict[str, str]:
    return dict(line.split(":", 1) for line in path.read_text().splitlines() if ":" in line)


def status(pid: int, proc: Path = PROC) -> tuple[float, float | None, int] | None:
    """(resident MiB, of it in shared memory MiB, threads) of one process; None when it is
    gone. Resident memory is the proportional set size (/proc/PID/smaps_rollup's Pss): a page
    shared by N processes counts 1/N in each, so a tree's sum counts Postgres's shared buffers
    once, not once per backend (VmRSS, read where there is no smaps_rollup, would). Shared
    memory (Pss_Shmem: Postgres's shared buffers) fills as its pages are first touched, up to
    its size; None where the kernel does not say."""
    folder = proc / str(pid)
    try:
        fields = _fields(folder / "status")
        rollup = _fields(folder / "smaps_rollup") if (folder / "smaps_rollup").exists() else {}
    except OSError:
        return None
    resident = rollup.get("Pss") or fields.get("VmRSS") or "0 kB"  # none: a zombie
    shared = rollup.get("Pss_Shmem")
    threads = int(fields.get("Threads", "0"))
    return _mib(resident), None if shared is None else _mib(shared), threads


def _mib(kib: str) -> float:
    return int(kib.split()[0]) / 1024


def open_fds(pid: int, proc: Path = PROC) -> int | None:
    """The count of /proc/PID/fd's entries; None when the process is gone."""
    try:
        return len(os.listdir(proc / str(pid) / "fd"))
    except OSError:
        return None


def usage(pids: Iterable[int], proc: Path = PROC) -> Usage | None:
    """The processes' resident memory (and its shared part), descriptors and threads summed
    (those gone left out); None when none of them runs."""
    rss, fds, threads, counted = 0.0, 0, 0, 0
    shared: float | None = 0.0
    for pid in pids:
        held, descriptors = status(pid, proc), open_fds(pid, proc)
        if held is None or descriptors is None:
            continue
        rss, threads = rss + held[0], threads + held[2]
        shared = None if shared is None or held[1] is None else shared + held[1]
        fds, counted = fds + descriptors, counted + 1
    return Usage(rss, fds, threads, counted, shared) if counted else None


TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: Iterable[int], proc: Path = PROC) -> float:
    """The CPU time (user + system, seconds) the processes used, with that of the children they
    reaped (/proc/PID/stat's utime, stime, cutime, cstime). Summed over a whole tree the figure
    only grows while its root runs: a child's time moves into its parent's when it is reaped
    (a Python worker that exits, a Postgres backend); processes gone meanwhile left out."""
    ticks = 0
    for pid in pids:
        try:
            stat = (proc / str(pid) / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        ticks += sum(int(x) for x in fields[11:15])
    return ticks / TICKS_PER_SECOND


def command(pid: int, proc: Path = PROC) -> str | None:
    """The process's command name (/proc/PID/comm: ``java``, ``postgres``); None when gone."""
    try:
        return (proc / str(pid) / "comm").read_text().strip()
    except OSError:
        return None


def age(pid: int, proc: Path = PROC) -> float | None:
    """Seconds since ``pid`` started (/proc/PID/stat's start time against /proc/uptime); None
    when it is gone."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
        uptime = float((proc / "uptime").read_text().split()[0])
    except OSError:
        return None
    started = int(stat[stat.rindex(")") + 2 :].split()[19])  # field 22, in clock ticks
    return uptime - started / TICKS_PER_SECOND


def folder(path: Path) -> tuple[int, int]:
    """(bytes, files) under ``path``: the files' apparent sizes summed; (0, 0) when it is not
    there. Files removed while it is walked are left out."""
    size = files = 0
    for root, _dirs, names in os.walk(path):
        for name in names:
            try:
                size += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
            files += 1
    return size, files
