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


@contextlib.contextmanager
def jvm_recording(jar: Path | None, pid: int, html: Path, title: str) -> Iterator[Path | None]:
    """Sample the JVM ``pid`` with async-profiler (``jar``: its loader, see
    `outboxkit_workshop.devstack.artifacts.profiler_jar`) while the block runs, on its interval
    timer (no
    perf events needed), every Java thread; an HTML flame graph, a tower per thread, is written to
    ``html`` (which the block receives, or None when the profiler is missing or cannot attach),
    and the same stacks as text beside it (``.collapsed``: one line per stack and its samples,
    for grep and other flame graph tools)."""
    java = shutil.which("java")
    if jar is None or java is None:
        yield None
        return
    html.parent.mkdir(parents=True, exist_ok=True)
    jfr = html.with_suffix(".jfr")
    tool = [java, "-jar", str(jar)]
    start = [*tool, "profiler", "start", "-e", "itimer", "-i", "5ms", "-f", str(jfr), str(pid)]
    if subprocess.run(start, capture_output=True).returncode != 0:
        yield None
        return
    try:
        yield html
    finally:
        subprocess.run([*tool, "profiler", "stop", str(pid)], capture_output=True)
        convert = [*tool, "converter", "--threads", "--title", title]
        for fmt, target in (("html", html), ("collapsed", html.with_suffix(".collapsed"))):
            subprocess.run([*convert, "-o", fmt, str(jfr), str(target)], capture_output=True)
        jfr.unlink(missing_ok=True)
