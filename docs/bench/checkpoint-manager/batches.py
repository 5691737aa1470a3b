import json, statistics, collections, datetime
jobs = {}; tasks = collections.defaultdict(list); stage_job = {}; progress = []
import sys, glob
for line in open(glob.glob(sys.argv[1] + "/*/events_*")[0] if glob.glob(sys.argv[1] + "/*/events_*") else glob.glob(sys.argv[1] + "/*")[0]):
    e = json.loads(line); ev = e["Event"]
    if ev == "SparkListenerJobStart":
        jobs[e["Job ID"]] = {"start": e["Submission Time"]}
        for s in e["Stage IDs"]: stage_job[s] = e["Job ID"]
    elif ev == "SparkListenerJobEnd":
        jobs[e["Job ID"]]["end"] = e["Completion Time"]
    elif ev == "SparkListenerTaskEnd":
        ti = e["Task Info"]; tm = e.get("Task Metrics", {})
        tasks[stage_job.get(e["Stage ID"])].append((ti["Launch Time"], ti["Finish Time"], tm.get("Executor Deserialize Time"), tm.get("Executor Run Time"), tm.get("Executor CPU Time",0)/1e6, tm.get("Input Metrics",{}).get("Records Read")))
    elif ev.endswith("QueryProgressEvent"):
        progress.append(e["progress"])
def ts(s): return datetime.datetime.fromisoformat(s.replace("Z","+00:00")).timestamp()*1000
rows=[]
for p in progress[3:]:
    rows_in = sum(s.get("numInputRows",0) for s in p["sources"])
    start = ts(p["timestamp"]); d = p["durationMs"]
    # find job within batch
    js = [(jid, j) for jid, j in jobs.items() if start <= j["start"] <= start + d["triggerExecution"]]
    if not js: continue
    jid, j = js[0]
    t = tasks[jid]
    rows.append(dict(rows=rows_in, trig=d["triggerExecution"], add=d["addBatch"], wal=d["walCommit"], commit=d["commitOffsets"], latest=d["latestOffset"], plan=d.get("queryPlanning",0), getb=d.get("getBatch",0),
        job_from_start=j["start"]-start, job=j["end"]-j["start"], after_job=start+d["triggerExecution"]-j["end"], ntask=len(t),
        launch=min(x[0] for x in t)-j["start"], run=max(x[3] for x in t), deser=max(x[2] for x in t), cpu=max(x[4] for x in t)))
print(len(rows), "batches")
for k in rows[0]:
    v=[r[k] for r in rows]; print(f"{k:14s} p50 {statistics.median(v):8.1f}  p90 {statistics.quantiles(v,n=10)[-1]:8.1f}")
