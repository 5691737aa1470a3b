"""A Python worker of the inbox sink freezes its long-lived objects once (spark_consumers.sink)."""

from __future__ import annotations

import subprocess
import sys


def test_a_python_worker_freezes_its_long_lived_objects_once() -> None:
    # In a process of its own: gc.freeze would otherwise reach into the test session's objects.
    probe = (
        "import gc\n"
        "from spark_consumers.sink import _settle\n"
        "assert gc.get_freeze_count() == 0\n"
        "_settle()\n"
        "frozen = gc.get_freeze_count()\n"
        "assert frozen > 10_000, frozen  # the modules and what they hold\n"
        "_settle()\n"
        "assert gc.get_freeze_count() == frozen  # once per worker process\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
