"""py-spy --gil profile (raw, collapsed) of the orders service under 8 clients; CPU per POST."""
import os, sys, time, tempfile, subprocess
from pathlib import Path
from devstack.settings import StackSettings
from devstack.stack import Stack
from saga_harness.processes import Saga
from outboxkit.bench.service import measure

out = Path(sys.argv[1]); out.parent.mkdir(parents=True, exist_ok=True)
stack = Stack(StackSettings(), echo=lambda l: None); stack.up()
with tempfile.TemporaryDirectory() as wd:
    saga = Saga(stack, Path(wd), echo=lambda l: None)
    try:
        saga.prepare(); saga.start_services(["orders"])
        saga.place_orders(300, seed=1, concurrency=8, retry_share=0.0)
        for c in (1, 8, 1, 8):
            print(c, measure(saga, 600, c, seed=int(time.time()) + c), flush=True)
        spy = subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(saga.pids["orders"]), "--rate", "500", "--gil", "--format", "raw", "--output", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)
        saga.place_orders(1500, seed=int(time.time()), concurrency=8, retry_share=0.0)
        spy.send_signal(2); spy.wait()
    finally:
        saga.stop()
