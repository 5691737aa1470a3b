import sys, time, statistics, shutil, os
from pyspark.sql import SparkSession
mgr = sys.argv[1]
b = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").config("spark.driver.bindAddress","127.0.0.1").config("spark.driver.host","127.0.0.1")
if mgr != "default":
    b = b.config("spark.sql.streaming.checkpointFileManagerClass", mgr)
s = b.getOrCreate(); s.sparkContext.setLogLevel("WARN")
ck = f"/tmp/prof/ck/cp-{os.getpid()}"
q = (s.readStream.format("rate").option("rowsPerSecond", 5).load()
     .writeStream.foreachBatch(lambda df, i: None).trigger(processingTime="0.2 seconds")
     .option("checkpointLocation", ck).start())
time.sleep(35)
ps = q.recentProgress
q.stop()
w = [p["durationMs"].get("walCommit", 0) for p in ps[20:]]
c = [p["durationMs"].get("commitOffsets", 0) for p in ps[20:]]
t = [p["durationMs"].get("triggerExecution", 0) for p in ps[20:]]
print(mgr.split(".")[-1], "n", len(w), "walCommit p50", statistics.median(w), "commitOffsets p50", statistics.median(c), "trigger p50", statistics.median(t))
print(sorted(os.listdir(ck + "/offsets"))[:6])
shutil.rmtree(ck)
