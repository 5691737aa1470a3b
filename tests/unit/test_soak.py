"""The soak run's pure parts: the trend of a series (slope, flat / bounded / growing), the bounds
the stack puts on its series, the plan of faults, the /proc readers, and its figures."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from outboxkit_workshop.bench import figures, publish
from outboxkit_workshop.saga_harness import proc, sampler, soak, trend
from outboxkit_workshop.saga_harness.chaos import Checks, Round
from outboxkit_workshop.saga_harness.trend import BOUNDED, FLAT, GROWING, Bound

MINUTE = 60.0
TIMES = [n * 15.0 for n in range(241)]  # an hour, a sample every 15 s


def line(start: float, per_hour: float) -> list[float | None]:
    return [start + per_hour * t / 3600 for t in TIMES]


def test_the_slope_is_the_least_squares_fit() -> None:
    assert trend.slope([0, 1, 2, 3], [1, 3, 5, 7]) == pytest.approx(2.0)
    assert trend.slope([0, 1, 2, 3], [0, 1, 0, 1]) == pytest.approx(0.2)
    assert trend.slope([5], [1]) == 0.0
    assert trend.slope([5, 5], [1, 2]) == 0.0


def test_a_constant_series_is_flat() -> None:
    found = trend.trend("rss:orders", TIMES, line(120, 0))
    assert (found.verdict, found.first, found.last, found.max) == (FLAT, 120, 120, 120)
    assert found.slope_per_hour == pytest.approx(0)


def test_a_steady_leak_is_growing_with_its_slope_per_hour() -> None:
    found = trend.trend("rss:consumers", TIMES, line(500, 200))  # 200 MiB an hour
    assert found.verdict == GROWING
    assert found.slope_per_hour == pytest.approx(200)
    assert found.growth == pytest.approx(100)  # over the second half hour
    assert found.tolerance == pytest.approx(max(32, 0.05 * 650))


def test_growth_within_the_tolerance_is_flat_and_a_falling_series_too() -> None:
    assert trend.trend("rss:orders", TIMES, line(1000, 80)).verdict == FLAT  # 40 < 5% of 1,060
    assert trend.trend("fds:orders", TIMES, line(400, -300)).verdict == FLAT


def test_only_the_second_half_is_judged_a_warm_up_is_not_growth() -> None:
    warm = [min(800.0, 100 + t * 700 / 1500) for t in TIMES]  # climbs for 25 min, then holds
    found = trend.trend("rss:consumers", TIMES, warm)
    assert found.verdict == FLAT
    assert (found.first, found.max) == (100, 800)


def test_growth_under_a_bound_is_bounded_over_it_growing() -> None:
    files = line(100, 800)
    assert trend.trend("folder files:checkpoints", TIMES, files, Bound(1000, "x")).verdict == (
        BOUNDED
    )
    over = trend.trend("folder files:checkpoints", TIMES, files, Bound(800, "x"))
    assert (over.verdict, over.bound, over.bound_why) == (GROWING, 800, "x")


def test_missing_samples_are_skipped_and_progress_is_never_judged() -> None:
    gaps = [None if n % 3 == 0 else v for n, v in enumerate(line(10, 0))]
    found = trend.trend("table rows:orders.outbox", TIMES, gaps)
    assert (found.verdict, found.samples) == (FLAT, 160)
    assert trend.trend("orders:placed", TIMES, line(0, 36_000)).verdict == ""
    empty = trend.trend("slot lag:s", TIMES, [None] * len(TIMES))
    assert (empty.verdict, empty.samples) == (FLAT, 0)


def test_a_per_order_bound_follows_the_first_half_s_bytes_per_order() -> None:
    orders = line(0, 36_000)
    kafka = line(1000, 36_000 * 500)  # 500 B an order
    bound = trend.per_order(TIMES, kafka, orders)
    assert bound == pytest.approx(1000 + 1.5 * 500 * 36_000)
    faster = [v + max(0.0, t - 1800) * 15_000 for t, v in zip(TIMES, kafka, strict=True)]
    assert trend.trend("folder bytes:kafka", TIMES, faster, Bound(bound, "")).verdict == GROWING
    assert trend.per_order(TIMES, kafka, [0.0] * len(TIMES)) is None


def test_the_stack_s_bounds() -> None:
    series = {
        "folder files:checkpoints": line(10, 100),
        "table rows:payments.inbox_watermark": [12.0] * len(TIMES),
        "table rows:payments.inbox_recent": line(0, 1000),
        "rss:kafka-1": line(400, 0),
        "rss:orders": line(100, 0),
        "shared:postgres": line(20, 200),
        "slot lag:orders": [None, 5e6, *([1e6] * (len(TIMES) - 2))],
    }
    limits = soak.Limits(
        wal_kept=1024.0**3,
        wal_segment=16 * 1024.0**2,
        checkpoint_queries=1,
        shared_memory=277 * 1024.0**2,
    )
    found = soak.bounds(TIMES, series, limits)
    assert found["folder files:checkpoints"].value == 4 * (soak.RETAINED_BATCHES + 1) + 16
    assert found["table rows:payments.inbox_recent"].value == 12 * (50_000 + 1)
    assert found["table bytes:payments.inbox_recent"].value == 12 * 50_001 * soak.ID_ROW_BYTES
    assert found["rss:kafka-1"].value == 1024
    assert "rss:orders" not in found
    # Postgres's shared buffers fill as pages are touched, up to its shared memory area.
    assert found["shared:postgres"].value == 277 + 32  # and the dynamic segments' slack
    shared = trend.trend(
        "shared:postgres", TIMES, series["shared:postgres"], found["shared:postgres"]
    )
    assert shared.verdict == BOUNDED
    assert found["folder bytes:pg_wal"].value == 1024.0**3 + 5e6 + 32 * 1024.0**2
    assert "folder bytes:kafka" not in found  # no orders series: no per-order bound


def test_analyse_orders_the_series_by_family_and_bounds_them() -> None:
    samples = [
        {"table rows:x.outbox": 0.0, "rss:orders": 90.0, "fds:orders": 20.0, "shared:orders": 0.0}
    ] * 3
    found = soak.analyse([0, 15, 30], samples, soak.Limits(1e9, 1.6e7, 1))
    assert [t.series for t in found] == [
        "rss:orders",
        "shared:orders",
        "fds:orders",
        "table rows:x.outbox",
    ]


def test_the_plan_strikes_a_fault_every_interval_within_the_run() -> None:
    planned = soak.plan(60, 5, random.Random(1), soak.KINDS)
    assert len(planned) == 11  # at 5, 10, ..., 55 minutes
    assert soak.SERVICE_KILL not in planned
    services = [k for k in planned if k.removesuffix("-kill") in ("orders", "payments", "shipping")]
    assert len(services) == 2  # once per cycle of five kinds
    assert {"postgres-crash", "broker-restart", "connect-task-restart", "spark-kill"} <= set(
        planned
    )
    assert planned == soak.plan(60, 5, random.Random(1), soak.KINDS)  # seeded
    assert soak.plan(10, 5, random.Random(1), soak.KINDS)[:1] == planned[:1]
    assert len(soak.plan(2, 1, random.Random(1), ["connect-task-restart"])) == 1
    assert soak.plan(4, 5, random.Random(1), soak.KINDS) == []


# -- /proc -------------------------------------------------------------------------------
def fake_process(root: Path, pid: int, parent: int, rss_kib: int, threads: int, fds: int) -> None:
    folder = root / str(pid)
    (folder / "fd").mkdir(parents=True)
    # A command name with a space and a parenthesis, as a JVM thread name can have.
    (folder / "stat").write_text(f"{pid} (java) x) S {parent} {pid} 0 0\n")
    (folder / "status").write_text(
        f"Name:\tjava\nVmRSS:\t  {rss_kib} kB\nThreads:\t{threads}\nPPid:\t{parent}\n"
    )
    for n in range(fds):
        (folder / "fd" / str(n)).touch()


def test_a_process_tree_is_summed_from_proc(tmp_path: Path) -> None:
    fake_process(tmp_path, 100, 1, 1024, 10, 5)  # the driver
    fake_process(tmp_path, 101, 100, 2048, 40, 30)  # its JVM
    fake_process(tmp_path, 102, 101, 512, 1, 4)  # a Python worker under the JVM
    fake_process(tmp_path, 200, 1, 9999, 9, 9)  # another program
    (tmp_path / "self").mkdir()
    parents = proc.parents(tmp_path)
    assert parents == {100: 1, 101: 100, 102: 101, 200: 1}
    pids = proc.tree(100, parents)
    assert sorted(pids) == [100, 101, 102]
    assert proc.usage(pids, tmp_path) == proc.Usage(3.5, 39, 51, 3)
    assert proc.usage([102, 999], tmp_path) == proc.Usage(0.5, 4, 1, 1)  # 999: gone
    assert proc.usage([999], tmp_path) is None
    # Where the kernel gives it, the proportional share: shared pages counted once in a sum.
    (tmp_path / "102" / "smaps_rollup").write_text("Rss:    512 kB\nPss:    256 kB\n")
    assert proc.usage([102], tmp_path) == proc.Usage(0.25, 4, 1, 1)  # shared memory unknown
    # And the part in shared memory (Postgres's shared buffers), apart from the private rest.
    assert proc.usage([102], tmp_path).private_mib == 0.25  # no Pss_Shmem: all of it
    rollup = "Rss:    2048 kB\nPss:    1024 kB\nPss_Anon:    256 kB\nPss_Shmem:    768 kB\n"
    (tmp_path / "102" / "smaps_rollup").write_text(rollup)
    found = proc.usage([102], tmp_path)
    assert found == proc.Usage(1.0, 4, 1, 1, shared_mib=0.75)
    assert found.private_mib == 0.25


def test_a_tree_s_cpu_time_counts_the_children_it_reaped(tmp_path: Path) -> None:
    def stat(pid: int, utime: int, stime: int, cutime: int, cstime: int) -> None:
        (tmp_path / str(pid)).mkdir()
        # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
        # utime stime cutime cstime ...
        fields = f"S 1 {pid} 0 0 0 0 0 0 0 0 {utime} {stime} {cutime} {cstime} 20 0 1 0"
        (tmp_path / str(pid) / "stat").write_text(f"{pid} (a (b) c) {fields}\n")

    tick = proc.TICKS_PER_SECOND
    stat(100, 2 * tick, tick, 3 * tick, tick)  # 3 s its own, 4 s of its reaped children
    stat(101, tick, 0, 0, 0)
    assert proc.cpu_seconds([100, 101], tmp_path) == 8.0
    assert proc.cpu_seconds([100, 999], tmp_path) == 7.0  # 999: gone


def test_the_sampler_gives_each_process_its_share_of_a_core_since_the_sample_before() -> None:
    watcher = object.__new__(sampler.Sampler)
    watcher._cpu = {}
    watcher.clock = iter([10.0, 20.0, 30.0, 40.0, 50.0]).__next__  # one reading per call
    assert watcher._cpu_since("orders", 7, 100.0, False) == {}  # nothing to compare with yet
    assert watcher._cpu_since("orders", 7, 105.0, False) == {"cpu:orders": 50.0}  # 5 s in 10
    assert watcher._cpu_since("orders", 8, 1.0, True) == {}  # started again: its count anew
    # While a JVM in it warms up (compiling its hot code) apart, never judged.
    assert watcher._cpu_since("orders", 8, 21.0, True) == {"cpu warming:orders": 200.0}
    assert watcher._cpu_since("orders", 8, 20.0, False) == {}  # a child lost: no negative
    assert not trend.family("cpu warming:orders").judged and trend.family("cpu:orders").judged
    assert trend.family("cpu:orders").unit == "% of a core"


def test_a_tree_warms_up_while_a_jvm_in_it_is_young(monkeypatch: pytest.MonkeyPatch) -> None:
    watcher = object.__new__(sampler.Sampler)
    watcher.cpu_settle_seconds = 600
    names = {1: "python", 2: "java", 3: "postgres"}
    ages = {1: 5.0, 2: 3600.0, 3: 1.0}
    monkeypatch.setattr(sampler.proc, "command", names.get)
    monkeypatch.setattr(sampler.proc, "age", ages.get)
    assert not watcher._warming([1, 2, 3])  # young, but no JVM: a backend, a fresh worker
    ages[2] = 30.0  # the JVM restarted under its old parent (an executor under its worker)
    assert watcher._warming([1, 2, 3])
    assert not watcher._warming([1, 3])


def test_a_catch_up_after_a_late_fault_is_not_cpu_growth() -> None:
    level = [40.0 + (n % 3) for n in range(len(TIMES))]
    late = list(level)
    late[-6] = late[-5] = 100.0  # two samples of catch-up, a minute before the end
    # Its raw slope over the second half would read as growth beyond the 5% of a core allowed.
    half_t, half_v = trend.second_half(TIMES, late)
    assert trend.slope(half_t, half_v) * (half_t[-1] - half_t[0]) > 5
    assert trend.trend("cpu:consumers", TIMES, late).verdict == FLAT
    rising = [40.0 + 20 * t / 3600 for t in TIMES]  # 20% of a core more an hour: growth
    assert trend.trend("cpu:consumers", TIMES, rising).verdict == GROWING
    assert trend.running_median([1.0, 9.0, 1.0, 1.0], 3) == [5.0, 1.0, 1.0, 1.0]
    assert trend.running_median([1.0, 9.0], 1) == [1.0, 9.0]


def test_a_process_s_age_comes_from_its_start_time(tmp_path: Path) -> None:
    (tmp_path / "uptime").write_text("1000.50 1900.00\n")
    (tmp_path / "7").mkdir()
    fields = ["S"] + ["0"] * 18 + [str(400 * proc.TICKS_PER_SECOND)]  # starttime: field 22
    (tmp_path / "7" / "stat").write_text(f"7 (java) {' '.join(fields)} 0 0\n")
    assert proc.age(7, tmp_path) == 600.5
    assert proc.age(8, tmp_path) is None  # gone
    mine = proc.age(os.getpid())
    assert mine is not None and 0 < mine < 7 * 24 * 3600


def test_this_process_reads_from_the_real_proc() -> None:
    found = proc.usage(proc.tree(os.getpid(), proc.parents()))
    assert found is not None
    assert found.rss_mib > 1 and found.threads >= 1 and found.fds >= 3


def test_a_folder_s_bytes_and_files(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "one").write_bytes(b"x" * 10)
    (tmp_path / "a" / "b" / "two").write_bytes(b"x" * 32)
    assert proc.folder(tmp_path) == (42, 2)
    assert proc.folder(tmp_path / "absent") == (0, 0)


# -- figures -----------------------------------------------------------------------------
def result(growing: bool) -> dict[str, object]:
    checks = Checks({"SHIPPED": 9, "CANCELLED": 3}, 0, 0, 0, [1.0, 2.0, 3.0], 4, True, [])
    checks.kafka_records, checks.kafka_duplicates = 48, 0
    leak = line(500, 200 if growing else 0)
    run = soak.Soak(
        params={"minutes": 60, "rate": 10, "fault_every": 5, "sample_seconds": 15, "seed": 1},
        times=TIMES,
        samples=[{"rss:consumers": v} for v in leak if v is not None],
        faults=[Round(1, "postgres-crash", 300.0, 7.0, 12.5, "o-1", "postgres")],
        checks=checks,
        trends=[trend.trend("rss:consumers", TIMES, leak)],
        duration=3600,
    )
    assert run.ok is not growing
    machine = {"cpus": 2, "platform": "Linux-6.1-x86_64", "python": "3.11.7"}
    return {**run.as_dict(), "machine": machine}


def test_the_figure_shows_each_verdict_the_faults_and_the_command() -> None:
    text = figures.soak(result(growing=True))
    row = "| `rss:consumers` | 500.0 MiB | 700.0 MiB | 700.0 MiB | 200.0 MiB /h | **growing** |"
    assert row in text
    assert "Growing: rss:consumers." in text
    assert "0 event ids seen more than once by a read_committed reader of the saga's 48" in text
    assert "| 5.0 | `postgres-crash` | postgres | 12.5 s |" in text
    assert "outboxkit dev soak --minutes 60 --rate 10 --fault-every 5" in text
    assert "Growing: nothing." in figures.soak(result(growing=False))


def test_publishing_a_soak_adds_its_section_once() -> None:
    page = "# Benchmarks\n"
    results = {"soak": result(growing=False)}
    added = publish.with_sections(page, results)
    assert added.count("<!-- figures:soak -->") == 1
    assert publish.with_sections(added, results) == added
    assert publish.with_sections(page, {}) == page
    rendered = publish.render(added, results)
    assert "| `rss:consumers` |" in rendered and "benchmarks/soak.png" in rendered
