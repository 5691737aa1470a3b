import sys, time, statistics
from outboxkit.bench import inbox as b
url = "postgresql+psycopg://postgres@127.0.0.1:55432/bench"
engine = b.prepare_database(url)
names = [b.BASELINE, "watermark, batch handler", "inbox, watermark only (window 0), batch handler",
         "inbox, source positions (window 0), batch handler",
         "inbox, exactly-once source (10,000 window), batch handler",
         "inbox, source positions and exactly-once window, batch handler", "inbox, batch handler"]
reps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
per = {n: [] for n in names}
for r in range(reps):
    for n in names:
        b.reset(engine)
        sink, handler = b.VARIANTS[n]
        work = list(b.batches(20000, 1000, positions=n in b.POSITIONED))
        for batch in work:
            t = time.perf_counter(); sink(engine, batch, handler); per[n].append(time.perf_counter() - t)
base = statistics.median(per[b.BASELINE])
for n in names:
    m = statistics.median(per[n]); q = statistics.quantiles(per[n], n=4)
    print(f"{m*1000:6.2f} ms/slice (q1 {q[0]*1000:6.2f})  {base/m:5.2f}  {n}")
