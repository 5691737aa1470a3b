"""Where a micro-batch's addBatch goes, from Spark's event log (`spark.eventLog.enabled=true`,
e.g. through PYSPARK_SUBMIT_ARGS): for each batch with input, its Spark job, the wait from the
job's start to its first task, the longest task and its run and deserialisation times, and the
job's end after its last task. Medians and p10/p90 over the batches.

    python event_log.py EVENT_LOG_FILE(.zstd)
"""

import json
import statistics
import subprocess
import sys
from collections import defaultdict
from datetime import datetime

path = sys.argv[1]
command = ["zstd", "-dc", path] if path.endswith(".zstd") else ["cat", path]
lines = subprocess.run(command, capture_output=True, text=True).stdout.splitlines()
jobs: dict[int, dict] = {}
stage_job: dict[int, int] = {}
tasks: dict[int, list[dict]] = defaultdict(list)
progress = []
for line in lines:
    try:
        event = json.loads(line)
    except ValueError:
        continue  # the last line of a log still being written
    kind = event["Event"]
    if kind == "SparkListenerJobStart":
        jobs[event["Job ID"]] = {"start": event["Submission Time"]}
        for stage in event["Stage IDs"]:
            stage_job[stage] = event["Job ID"]
    elif kind == "SparkListenerJobEnd":
        jobs[event["Job ID"]]["end"] = event["Completion Time"]
    elif kind == "SparkListenerTaskEnd":
        info, metrics = event["Task Info"], event.get("Task Metrics") or {}
        tasks[stage_job[event["Stage ID"]]].append(
            {
                "launch": info["Launch Time"],
                "finish": info["Finish Time"],
                "deserialize": metrics.get("Executor Deserialize Time", 0),
                "run": metrics.get("Executor Run Time", 0),
                "cpu": metrics.get("Executor CPU Time", 0) / 1e6,
            }
        )
    elif kind.endswith("QueryProgressEvent"):
        progress.append(event["progress"])

batches = []
for p in progress:
    rows = sum(s.get("numInputRows", 0) for s in p["sources"])
    if not rows:
        continue
    began = datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp() * 1000
    durations = p["durationMs"]
    ended = began + durations["triggerExecution"]
    ids = [j for j, v in jobs.items() if began <= v["start"] <= ended and "end" in v]
    ran = [t for j in ids for t in tasks[j]]
    if not ran:
        continue
    batches.append(
        {
            "rows": rows,
            "triggerExecution": durations["triggerExecution"],
            "addBatch": durations["addBatch"],
            "Spark job": sum(jobs[j]["end"] - jobs[j]["start"] for j in ids),
            "job start -> first task": min(t["launch"] for t in ran)
            - min(jobs[j]["start"] for j in ids),
            "longest task": max(t["finish"] - t["launch"] for t in ran),
            "its run time": max(t["run"] for t in ran),
            "its JVM CPU": max(t["cpu"] for t in ran),
            "deserialize": max(t["deserialize"] for t in ran),
            "last task -> job end": max(jobs[j]["end"] for j in ids)
            - max(t["finish"] for t in ran),
        }
    )
print(f"{len(batches)} batches with input")
for key in batches[0] if batches else ():
    values = sorted(b[key] for b in batches)
    print(
        f"{key:24s} median {statistics.median(values):8.1f}"
        f"  p10 {values[len(values) // 10]:8.1f}  p90 {values[9 * len(values) // 10]:8.1f}"
    )
