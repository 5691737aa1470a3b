"""Flame graphs with py-spy, when it is installed (the bench extra puts it in the venv).

py-spy reads the target's memory (root, or ptrace allowed) and samples only threads that run
Python on a CPU (no ``--idle``), so a graph shows where CPU goes, not where a thread waits.
With ``subprocesses`` it follows the target's children too: a Spark driver's JVM, and under it
the Python workers that run the inbox sink's tasks, each under its own process frame.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path


def py_spy() -> str | None:
    """The py-spy executable beside this interpreter (the bench extra), else on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


@contextlib.contextmanager
def recording(
    pid: int, svg: Path, *, subprocesses: bool = False, rate: int = 200
) -> Iterator[Path | None]:
    """Sample ``pid`` (and, with ``subprocesses``, its descendants) while the block runs; the
    graph is written to ``svg``, which the block receives, or None without py-spy."""
    spy = py_spy()
    if spy is None:
        yield None
        return
    svg.parent.mkdir(parents=True, exist_ok=True)
    command = [spy, "record", "--pid", str(pid), "--rate", str(rate), "--nonblocking"]
    command += ["--subprocesses"] * subprocesses + ["--output", str(svg)]
    record = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.0)  # attached
        yield svg
    finally:
        record.send_signal(2)  # SIGINT: py-spy writes the graph and exits
        record.wait(timeout=120)
