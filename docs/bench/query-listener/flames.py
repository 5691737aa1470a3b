"""Flame graphs of the saga's consumer driver at 10 orders/s (the saga running: `outboxkit saga
up`): the orders POSTed for 100 s, and from 40 s to 70 s py-spy's graph of the driver's Python
and its Python workers (CPU samples) and async-profiler's of the driver's JVM, every thread.

    python flames.py LABEL CONSUMERS_PID ORDERS_URL
"""

import subprocess
import sys
import time
from pathlib import Path

from devstack.artifacts import profiler_jar
from devstack.settings import StackSettings
from outboxkit.bench.flame import jvm_recording, recording

label, pid, orders = sys.argv[1], int(sys.argv[2]), sys.argv[3]
here = Path(__file__).resolve().parent
load = subprocess.Popen(
    [sys.executable, str(here / "driver-threads" / "load.py"), orders, "1000", "10"]
)
children = subprocess.run(["pgrep", "-P", str(pid), "java"], capture_output=True, text=True)
jvm = int(children.stdout.split()[0])  # the driver's JVM, a child of its Python
time.sleep(40)
jar = profiler_jar(StackSettings().cache_dir)
with (
    recording(pid, here / f"driver-{label}.svg", subprocesses=True),
    jvm_recording(jar, jvm, here / f"driver-jvm-{label}.html", f"consumer driver JVM, {label}"),
):
    time.sleep(30)
load.wait()
