"""One variant of the saga, measured with `bench saga`'s own functions: fixed rates (latency,
hops, batch phases, CPU per order by process), then a step load judged by issue 27's rule (a
step held for 60 s with p99 <= 5 s). The code measured is the one on PYTHONPATH: a checkout of
the code before the change for "before", the repository for "after" (see README.md).

    PYTHONPATH=<checkout> python ab.py LABEL [RATES] [STEPS]
"""

import json
import sys
import tempfile
from pathlib import Path

from devstack.settings import StackSettings
from devstack.stack import Stack
from outboxkit.bench.report import Progress
from outboxkit.bench.saga import _step, fixed_rate
from saga_harness.processes import SKUS, Saga

label = sys.argv[1]
rates = [float(r) for r in (sys.argv[2] if len(sys.argv) > 2 else "10,50").split(",")]
steps = [float(r) for r in (sys.argv[3] if len(sys.argv) > 3 else "100,150,200").split(",")]
stack = Stack(StackSettings(), echo=lambda line: None)
stack.up()
with tempfile.TemporaryDirectory(prefix="ab-saga-") as workdir:
    saga = Saga(stack, Path(workdir), echo=lambda line: None)
    try:
        saga.prepare(stock=dict(SKUS))
        saga.start_services()
        saga.start_consumers()
        saga.warm_up()
        for n, rate in enumerate(rates):
            with Progress(f"{label} {rate:g}/s", int(rate * 30)) as progress:
                got = fixed_rate(saga, rate, 30, 200 + n, progress)
            got.pop("latencies_seconds")
            keep = ("p50", "p99", "hops_p50", "batch_phases_ms", "cpu_ms_per_order")
            print(label, "rate", rate, json.dumps({k: got[k] for k in keep}), flush=True)
        for n, rate in enumerate(steps):
            with Progress(f"{label} step {rate:g}/s", int(rate * 60)) as progress:
                got = _step(saga, rate, 60, 500 + n, progress)
            got["held_p99_5s"] = bool(got["held"]) and got["p99_second_half"] <= 5.0
            print(label, "step", rate, json.dumps(got), flush=True)
            if not got["held_p99_5s"]:
                break
    finally:
        saga.stop()
