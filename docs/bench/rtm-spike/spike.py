"""Spike: does PySpark's real-time mode carry a Kafka source into a Python ``foreach`` writer,
and how late does each row reach the writer's ``process``?

Runs on the dev stack's broker (``outboxkit dev stack up``): makes a topic of PARTITIONS
partitions, produces RATE records a second for SECONDS (each value the time it was produced),
and runs the query in one of two modes side by side in one process, one after the other:

- ``rt``: ``trigger(realTime=BATCH)`` into ``foreach(Writer())`` (update mode);
- ``mb``: a micro-batch query (``trigger(processingTime="0 seconds")``) into the same writer.

For each row it records produce -> ``process`` delay; ``open``/``close`` calls with their
epoch; then the CPU the driver JVM and its Python workers burn over IDLE seconds with no
records. ``--fail-once`` raises in ``process`` once (a task failure), ``--restart`` runs the
same checkpoint twice (a driver restart) to show which offsets are delivered again.

    OUTBOXKIT_STACK_DIR=... python docs/bench/rtm-spike/spike.py --mode rt --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic


def cpu_seconds(root: int) -> float:
    """User + system CPU of ``root`` and every process under it, in seconds."""
    tick = os.sysconf("SC_CLK_TCK")
    stats: dict[int, tuple[int, float]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        stats[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick)
    tree, total = {root}, 0.0
    for _ in range(4):  # driver -> JVM -> daemon -> workers
        tree |= {pid for pid, (parent, _) in stats.items() if parent in tree}
    for pid in tree:
        total += stats.get(pid, (0, 0.0))[1]
    return total


def produce(bootstrap: str, topic: str, rate: float, seconds: float, partitions: int) -> int:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    sent = 0
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        value = json.dumps({"t": time.time(), "n": sent}).encode()
        producer.produce(topic, value=value, key=str(sent).encode(), partition=sent % partitions)
        producer.poll(0)
        sent += 1
        time.sleep(max(0.0, start + sent / rate - time.monotonic()))
    producer.flush(30)
    return sent


class Writer:
    """Appends one JSON line per call to LOG: open, each row's delay, close."""

    log = ""
    fail_once = ""

    def open(self, partition_id, epoch_id):
        self.partition, self.epoch = partition_id, epoch_id
        self.file = open(self.log, "a")  # noqa: SIM115
        self.write({"ev": "open", "at": time.time()})
        return True

    def process(self, row):
        now = time.time()
        if self.fail_once and not os.path.exists(self.fail_once) and row.offset >= 20:
            Path(self.fail_once).write_text("failed")
            raise RuntimeError("spike: one task failure")
        produced = json.loads(row.value)["t"]
        self.write(
            {
                "ev": "row",
                "kp": row.partition,
                "off": row.offset,
                "delay": now - produced,
                "at": now,
            }
        )

    def close(self, error):
        self.write({"ev": "close", "at": time.time(), "error": repr(error) if error else None})
        self.file.close()

    def write(self, record: dict) -> None:
        record.update(part=self.partition, epoch=self.epoch)
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=("rt", "mb"), default="rt")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rate", type=float, default=20)
    parser.add_argument("--seconds", type=float, default=40)
    parser.add_argument("--idle", type=float, default=30)
    parser.add_argument("--batch", default="5 seconds")
    parser.add_argument("--buffer", help="spark.buffer.size (default Spark's 64k)")
    parser.add_argument("--fail-once", action="store_true")
    parser.add_argument("--restart", action="store_true")
    parser.add_argument("--topic", help="an existing topic (a run after a crash); default: new")
    parser.add_argument("--tag", help="name of the log and checkpoint (default from the mode)")
    parser.add_argument(
        "--crash-after", type=float, help="kill -9 this process group S s into producing"
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    from pyspark.sql import SparkSession

    from outboxkit.devstack.artifacts import cached_spark_jars
    from outboxkit.devstack.settings import StackSettings
    from outboxkit.devstack.stack import Stack

    stack = Stack(StackSettings())
    bootstrap = stack.bootstrap_servers()
    topic = args.topic or f"rtm-spike-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if not args.topic:
        admin.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result(30)
    print(f"topic {topic}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    tag = args.tag or f"{args.mode}-p{args.partitions}-b{args.buffer or 'default'}"
    log = args.out / f"{tag}.jsonl"
    if not args.topic:
        log.unlink(missing_ok=True)
    Writer.log = str(log)
    Writer.fail_once = str(args.out / f"{tag}.failed") if args.fail_once else ""
    Path(Writer.fail_once or "/nonexistent").unlink(missing_ok=True)

    # One long-running task per Kafka partition, all at once: a slot each, and one spare.
    # local[N,F]: F attempts per task (a task failure retried rather than failing the query).
    jars = ",".join(str(j) for j in cached_spark_jars(stack.settings.cache_dir))
    builder = (
        SparkSession.builder.master(f"local[{args.partitions + 1},2]")
        .appName("rtm-spike")
        .config("spark.jars", jars)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.locality.wait", "0s")
        .config("spark.python.worker.reuse", "true")
    )
    if args.buffer:
        builder = builder.config("spark.buffer.size", args.buffer)
    session = builder.getOrCreate()
    checkpoint = args.out / f"{tag}-checkpoint"

    def start():
        source = (
            session.readStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .load()
            .select("key", "value", "topic", "partition", "offset")
        )
        writer = source.writeStream.foreach(Writer()).option("checkpointLocation", str(checkpoint))
        if args.mode == "rt":
            writer = writer.outputMode("update").trigger(realTime=args.batch)
        else:
            writer = writer.trigger(processingTime="0 seconds")
        return writer.start()

    summary: dict = {"mode": args.mode, "partitions": args.partitions, "buffer": args.buffer}
    query = start()
    time.sleep(15)  # the query's first batch, its Python workers
    jvm = os.getpid()
    if args.crash_after:
        import signal

        def crash() -> None:
            time.sleep(args.crash_after)
            print("kill -9 of the driver, its JVM and workers", flush=True)
            os.killpg(os.getpgid(0), signal.SIGKILL)

        threading.Thread(target=crash, daemon=True).start()
    produced = produce(bootstrap, topic, args.rate, args.seconds, args.partitions)
    time.sleep(12)
    summary["produced"] = produced
    cpu0, t0 = cpu_seconds(jvm), time.monotonic()
    time.sleep(args.idle)
    summary["idle_cpu_share"] = (cpu_seconds(jvm) - cpu0) / (time.monotonic() - t0)
    summary["exception"] = str(query.exception()) if query.exception() else None
    if args.restart:
        query.stop()
        query = start()
        time.sleep(15)
        produce(bootstrap, topic, args.rate, 5, args.partitions)
        time.sleep(12)
    query.stop()
    session.stop()

    rows = [json.loads(line) for line in log.read_text().splitlines()]
    delays = sorted(r["delay"] for r in rows if r["ev"] == "row")
    delivered: dict[tuple[int, int], int] = {}
    for r in rows:
        if r["ev"] == "row":
            delivered[(r["kp"], r["off"])] = delivered.get((r["kp"], r["off"]), 0) + 1
    if delays:
        q = statistics.quantiles(delays, n=100, method="inclusive") if len(delays) > 1 else delays
        summary["delay_p50"] = statistics.median(delays)
        summary["delay_p99"] = q[98] if len(q) > 98 else delays[-1]
        summary["delay_max"] = delays[-1]
    summary["rows"] = len(delays)
    summary["distinct_offsets"] = len(delivered)
    summary["delivered_again"] = sum(1 for n in delivered.values() if n > 1)
    summary["opens"] = sum(1 for r in rows if r["ev"] == "open")
    summary["epochs"] = sorted({r["epoch"] for r in rows if r["ev"] == "open"})
    summary["close_errors"] = [r["error"] for r in rows if r["ev"] == "close" and r["error"]]
    (args.out / f"{tag}.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    threading.current_thread().name = "spike"
    main()
