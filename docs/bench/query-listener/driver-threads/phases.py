"""Medians of the last 100 batches' phases in progress log lines. Usage: phases.py LOG..."""

import re
import statistics
import sys

KEYS = ("rows", "walCommit", "addBatch", "commitOffsets", "triggerExecution")
for path in sys.argv[1:]:
    batches = []
    with open(path) as f:
        for line in f:
            found = re.search(r"batch (\d+): (\d+) rows, ms (.*)", line)
            if found:
                phases = {k: int(v) for k, v in (kv.split("=") for kv in found.group(3).split())}
                batches.append({**phases, "rows": int(found.group(2))})
    batches = batches[-100:]
    medians = (f"{k} {statistics.median(b.get(k, 0) for b in batches):.0f}" for k in KEYS)
    print(path, len(batches), "  ".join(medians))
