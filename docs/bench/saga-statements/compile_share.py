"""Share of the consumers' Python workers' samples spent compiling SQL, by the framework or saga
line that executed the statement, from a py-spy speedscope recording of the consumer driver
with --subprocesses. Usage: compile_share.py RECORDING.json"""

import collections
import json
import sys

with open(sys.argv[1]) as f:
    recording = json.load(f)
frames = recording["shared"]["frames"]
OURS = ("orders.py", "payments.py", "shipping.py", "recorder.py", "slice.py", "apply.py")


def where(index: int) -> str:
    frame = frames[index]
    return f"{frame['name']} {frame.get('file', '').split('/')[-1]}:{frame.get('line', '')}"


for profile in recording["profiles"]:
    stacks = [[where(i) for i in s] for s in profile["samples"]]
    if not any("traced_batches" in f for s in stacks for f in s):
        continue  # not a Python worker
    compiling = [s for s in stacks if any("_compile_w_cache" in f for f in s)]
    callers = collections.Counter(
        next((f for f in reversed(s) if any(k in f for k in OURS)), "other") for s in compiling
    )
    share = 100 * len(compiling) / len(stacks)
    print(f"{profile['name'][:40]}: {len(stacks)} samples, compiling SQL {share:.1f}%")
    for caller, n in callers.most_common(8):
        print(f"  {100 * n / len(stacks):5.1f}%  {caller}")
