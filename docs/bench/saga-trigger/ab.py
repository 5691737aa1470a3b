"""Idle CPU per process, then fixed_rate at 10/s (the saga bench's own function)."""
import os, sys, time, tempfile, json
from pathlib import Path
from devstack.settings import StackSettings
from devstack.stack import Stack
from saga_harness.processes import Saga, SKUS
from outboxkit.bench.saga import process_ticks, fixed_rate
from outboxkit.bench.report import Progress

label = sys.argv[1]
rates = [float(r) for r in (sys.argv[2] if len(sys.argv) > 2 else "10").split(",")]
stack = Stack(StackSettings(), echo=lambda l: None)
stack.up()
hz = os.sysconf("SC_CLK_TCK")
with tempfile.TemporaryDirectory(dir=os.environ.get("EXP_DIR")) as wd:
    saga = Saga(stack, Path(wd), echo=lambda l: None)
    try:
        saga.prepare(stock=dict(SKUS)); saga.start_services(); saga.start_consumers(trigger=float(os.environ.get("EXP_TRIGGER", "0.5"))); saga.warm_up()
        time.sleep(10)
        t0 = process_ticks(saga); b = time.monotonic(); time.sleep(20); sec = time.monotonic() - b
        t1 = process_ticks(saga)
        print(label, "idle cores", {k: round((t1[k]-t0[k])/hz/sec, 3) for k in t1}, flush=True)
        for n, rate in enumerate(rates * 2):
            with Progress("x", 1000) as p:
                r = fixed_rate(saga, rate, 20, 500 + n, p)
            r.pop("latencies_seconds")
            print(label, rate, json.dumps({k: r[k] for k in ("p50", "p99", "hops_p50", "batch_phases_ms", "cpu_ms_per_order")}, default=str), flush=True)
    finally:
        saga.stop()
