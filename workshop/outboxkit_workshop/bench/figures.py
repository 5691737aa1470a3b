"""The figure tables of the benchmarks pages, rendered from a run's results (the JSON that
`outboxkit dev bench` writes): one block per scenario and the headline summary. Short cells, and
each table states the one machine it was measured on (cores, memory, system, versions; never
its name)."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from outboxkit_workshop.bench import cost_figures
from outboxkit_workshop.bench.report import FROZEN_INPUT, markdown_table
from outboxkit_workshop.saga_harness.trend import CPU_SETTLE_SECONDS

TRANSACTIONS_DEFAULT, REPS_DEFAULT, EVENTS_DEFAULT = 2000, 3, 20_000
ORDERS_DEFAULT = 600  # POSTs per round of `bench service`

Results = Mapping[str, Mapping[str, Any]]


# -- cells ----------------------------------------------------------------------------------
def _spread(samples: Sequence[float]) -> tuple[float, float, float]:
    return min(samples), statistics.median(samples), max(samples)


def _med(series: Mapping[str, Any]) -> float:
    return float(series["median"])


def _rate(series: Mapping[str, Any]) -> str:
    """``median (min-max)`` of a rate, no decimals."""
    return f"{series['median']:,.0f} ({series['min']:,.0f}-{series['max']:,.0f})"


def _x(value: float) -> str:
    return f"{value:.2f}"


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    raise AssertionError


def machine(found: Mapping[str, Any]) -> str:
    """What a run was measured on, without the machine's name: cores, memory when recorded,
    system, and the versions of the pieces."""
    parts = [f"{found['cpus']} CPUs"]
    if found.get("memory_gib"):
        parts.append(f"{found['memory_gib']:.0f} GiB RAM")
    system = str(found.get("platform", "")).split("-")
    arch = next((p for p in system if p in ("x86_64", "aarch64", "arm64", "amd64")), "")
    release = system[1] if len(system) > 1 and system[1][:1].isdigit() else ""
    parts.append(" ".join(p for p in (system[0], release, arch) if p))
    parts.append(f"Python {found['python']}")
    if "postgres" in found:
        parts.append(f"Postgres {str(found['postgres']).split()[0]}")
    for key, label in (("kafka", "Kafka"), ("debezium", "Debezium"), ("pyspark", "Spark")):
        if key in found:
            parts.append(f"{label} {found[key]}")
    return ", ".join(parts)


def _command(name: str, params: Mapping[str, Any], defaults: Mapping[str, Any]) -> str:
    flags = [f"--{k} {params[k]}" for k, v in defaults.items() if k in params and params[k] != v]
    return f"`./dev.sh bench {' '.join([name, *flags])}`"


def _footer(data: Mapping[str, Any], command: str) -> str:
    return f"Machine: {machine(data['machine'])}. Reproduce: {command}.\n"


def _measured_since(name: str, present: bool, what: str) -> None:
    """Refuse a result written before its benchmark measured ``what``."""
    if not present:
        raise ValueError(
            f"docs/benchmarks/{name}.json predates {what}: run `./dev.sh bench {name}`, then "
            f"`outboxkit dev bench publish --from bench-results`"
        )


# -- one block per scenario -----------------------------------------------------------------
# The outbox benchmark's drivers: the prefix of their variants' names, and their label.
DRIVERS = (("", "sync"), ("async, ", "async"))


def outbox(data: Mapping[str, Any]) -> str:
    p, tps = data["params"], data["transactions_per_second"]
    _measured_since("outbox", "async_driver" in p, "the async driver's variants")
    cpu, wal = data["client_cpu_us_per_transaction"], data["wal_bytes_per_transaction"]
    modes = ("delete", "retain", "message")
    rows = []
    for w in p["writers"]:
        for prefix, driver in DRIVERS:
            base = tps[f"{w} / {prefix}no outbox"]
            rows.append(
                [w, driver, _rate(base)]
                + [_x(_med(tps[f"{w} / {prefix}outbox, {m} mode"]) / _med(base)) for m in modes]
            )
    w = p["writers"][0]
    for prefix, driver in DRIVERS:
        base_cpu = statistics.median(cpu[f"{w} / {prefix}no outbox"])
        base_wal = statistics.median(wal[f"{w} / {prefix}no outbox"])
        cells = []
        for m in modes:
            key = f"{w} / {prefix}outbox, {m} mode"
            extra_cpu = statistics.median(cpu[key]) - base_cpu
            extra_wal = statistics.median(wal[key]) - base_wal
            cells.append(f"{extra_cpu:,.0f} µs / {extra_wal:,.0f} B")
        rows.append([f"per event, {w} writer", driver, "client CPU / WAL", *cells])
    table = markdown_table(
        ["writers", "driver", "no outbox, tx/s", "delete", "retain", "message"], rows
    )
    method = (
        f"{p['transactions']:,} transactions per measurement (one order row, plus one "
        f"{p['payload_bytes']}-byte event), {p['reps']} interleaved repetitions; sync: a "
        "Session per transaction, one thread per writer; async: an AsyncSession on "
        f"{p['async_driver']}'s async driver, one task of one event loop per writer, the "
        "event through AsyncUnitOfWork. The modes' cells are the ratio of medians to the same "
        "transaction without the outbox on the same driver.\n\n"
    )
    command = _command("outbox", p, {"transactions": TRANSACTIONS_DEFAULT, "reps": REPS_DEFAULT})
    return method + table + "\n" + _footer(data, command)


def cdc(data: Mapping[str, Any]) -> str:
    p, eps = data["params"], data["events_per_second"]
    lag = data["streaming_lag_seconds"]
    rows = [
        [f"streaming at {p['writers']} writers, {m} mode", _rate(eps[name]), _lag(lag[m])]
        for m in ("delete", "retain", "message")
        for name in [f"streaming, commit -> Kafka, {m} mode"]
    ]
    rows.append(["backlog drain -> Kafka", _rate(eps["backlog drain -> Kafka"]), ""])
    rows.append(["raw produce, same broker", _rate(eps["raw produce"]), ""])
    table = markdown_table(["path", "events/s, median (min-max)", "commit -> Kafka"], rows)
    method = (
        f"{p['events']:,} events per measurement, {p['reps']} repetitions; the streaming "
        "rows are bounded by the writers, the lag is the median (min-max) per repetition.\n\n"
    )
    command = _command("cdc", p, {"events": EVENTS_DEFAULT, "reps": REPS_DEFAULT})
    return method + table + "\n" + _footer(data, command)


def _lag(samples: Sequence[float]) -> str:
    lo, mid, hi = _spread(samples)
    return f"{mid:.2f} s ({lo:.2f}-{hi:.2f})"


INBOX_ROWS = (
    ("no dedup", "unguarded, batch handler"),
    ("source positions", "inbox, source positions (window 0), batch handler"),
    ("offset watermark", "inbox, watermark only (window 0), batch handler"),
    ("watermark + 10,000-id window", "inbox, exactly-once source (10,000 window), batch handler"),
    ("source positions + window", "inbox, source positions and exactly-once window, batch handler"),
    ("watermark + 50,000-id window", "inbox, batch handler"),
    ("message-id table", "message-id, batch handler"),
    ("offset inbox, per-event handler", "inbox, per-event handler"),
)


def inbox(data: Mapping[str, Any]) -> str:
    p, rps, state = data["params"], data["rows_per_second"], data["state_size"]
    base = _med(rps["unguarded, batch handler"])
    top = str(max(p["checkpoints"]))
    sizes = {"source positions": "source positions", "offset watermark": "watermark"}
    sizes |= {"watermark + 50,000-id window": "inbox", "message-id table": "message-id"}
    rows = []
    for label, key in INBOX_ROWS:
        if key not in rps:
            continue
        held = state.get(sizes.get(label, ""), {}).get(top)
        kept = f"{held['rows']:,} rows, {_size(held['bytes'])}" if held else ""
        rows.append([label, _rate(rps[key]), _x(_med(rps[key]) / base), kept])
    table = markdown_table(
        ["dedup", "rows/s, median (min-max)", "vs no dedup", f"state at {int(top):,} events"],
        rows,
    )
    method = (
        f"{p['events']:,} events over 4 partitions, {p['batch']:,} records per partition "
        f"transaction, {p['reps']} interleaved repetitions; the batch handler (one COPY per "
        "slice) unless the row says otherwise."
        + (f" {FROZEN_INPUT}" if p.get("input_frozen") else "")
        + "\n\n"
    )
    command = _command("inbox", p, {"events": EVENTS_DEFAULT, "reps": REPS_DEFAULT})
    return method + table + "\n" + _footer(data, command)


def pipeline(data: Mapping[str, Any]) -> str:
    p, eps = data["params"], data["events_per_second"]
    base = _med(eps["Debezium drain alone"])
    labels = {
        "Debezium drain alone": "Debezium drain alone",
        "outbox -> Spark inbox, batch handler": "outbox -> Spark inbox, batch handler",
        "outbox -> Spark inbox, per-event handler": "outbox -> Spark inbox, per-event handler",
    }
    rows = [[label, _rate(eps[k]), _x(_med(eps[k]) / base)] for k, label in labels.items()]
    trickle = data.get("one_at_a_time", {}).get("latency_seconds")
    if trickle:
        lo, mid, hi = _spread(trickle)
        rows.append(
            ["one event at a time, commit -> applied", f"p50 {mid:.2f} s ({lo:.2f}-{hi:.2f})", ""]
        )
    table = markdown_table(["path", "events/s, median (min-max)", "vs drain"], rows)
    method = (
        f"A backlog of {p['events']:,} events over {p.get('partitions', 4)} partitions, Spark "
        f"`{p.get('spark_master', 'local[2]')}`, trigger {p['trigger_seconds']:g} s, "
        f"{p['reps']} repetitions, timed from the connector's resume to the last business "
        "row.\n\n"
    )
    command = _command("pipeline", p, {"events": EVENTS_DEFAULT, "reps": REPS_DEFAULT})
    return method + table + "\n" + _footer(data, command)


def _reps(runs: Sequence[Mapping[str, Any]], key: str, fmt: str = ".2f") -> str:
    values = [r[key] for r in runs]
    if len(values) == 1:
        return format(values[0], fmt)
    return f"{format(min(values), fmt)}-{format(max(values), fmt)}"


def saga(data: Mapping[str, Any]) -> str:
    p = data["params"]
    rows = []
    for rate, runs in data["fixed_rates"].items():
        hops = [v for r in runs for v in r["hops_p50"].values()]
        rows.append(
            [
                f"{float(rate):g}/s",
                f"{_reps(runs, 'p50')} s",
                f"{_reps(runs, 'p99')} s",
                f"{min(hops):.2f}-{max(hops):.2f} s",
                f"{statistics.median(sum(r['cpu_ms_per_order'].values()) for r in runs):.0f} ms",
            ]
        )
    table = markdown_table(
        ["orders/s", "POST -> final p50", "p99", "hop p50", "CPU per order"], rows
    )
    held = [s for s in data.get("step_load", []) if s.get("held")]
    steps = markdown_table(
        ["step", "final in time", "p50", "p99, 2nd half", "held"],
        [
            [
                f"{s['rate']:g}/s",
                f"{100 * s['completed_in_time']:.1f}%",
                f"{s['p50']:.2f} s",
                f"{s['p99_second_half']:.2f} s",
                "yes" if s.get("held") else "no",
            ]
            for s in data.get("step_load", [])
            if s.get("p50") == s.get("p50")  # NaN: the step ended early
        ],
    )
    warm = data.get("warm_up")
    warmed = (
        f" after {warm['seconds']:g} s at the first rate, not counted (its p50 / p99: "
        f"{warm['p50']:.2f} / {warm['p99']:.2f} s)"
        if warm
        else ""
    )
    method = (
        f"Fixed rates for {p['duration']:g} s each, {p['reps']} repetitions (ranges are over "
        f"the repetitions){warmed}, consumers' trigger {p['trigger_seconds']:g} s; then a step "
        f"load of {p['step_seconds']:g} s per rate. CPU per order: every process of the "
        "stack.\n\n"
    )
    capacity = (
        f"Highest step held: {max((s['rate'] for s in held), default=0):g} orders/s; the "
        f"orders service alone: {data['post_rate_alone']:,.0f} POST/s.\n\n"
    )
    command = _command("saga", {"reps": p["reps"]}, {"reps": 2})
    return method + table + "\n" + steps + "\n" + capacity + _footer(data, command)


def _service_medians(data: Mapping[str, Any], variant: str, key: str) -> list[float]:
    """``variant``'s median of ``key`` at each client count."""
    return [
        statistics.median(r[key] for r in data["variants"][variant][str(c)])
        for c in data["clients"]
    ]


def _service_command(data: Mapping[str, Any]) -> str:
    params = {"reps": data["reps"], "orders": data["orders_per_round"]}
    return _command("service", params, {"reps": REPS_DEFAULT, "orders": ORDERS_DEFAULT})


def service(data: Mapping[str, Any]) -> str:
    _measured_since("service", "variants" in data, "the async and sync routes side by side")
    posts = {v: _service_medians(data, v, "posts_per_second") for v in ("async", "sync")}
    rows = []
    for n, c in enumerate(data["clients"]):
        mine, sync = posts["async"][n], posts["sync"][n]
        cpu = {
            v: _spread([r["cpu_ms_per_post"] for r in data["variants"][v][str(c)]])
            for v in ("async", "sync")
        }
        rows.append(
            [
                c,
                f"{mine:,.0f}",
                f"{sync:,.0f}",
                _x(mine / sync),
                *(f"{mid:.1f} ms ({lo:.1f}-{hi:.1f})" for lo, mid, hi in cpu.values()),
                _x(cpu["async"][1] / cpu["sync"][1]),
            ]
        )
    table = markdown_table(
        [
            "clients",
            "POST/s async",
            "POST/s sync",
            "async / sync",
            "CPU per POST async",
            "CPU per POST sync",
            "async / sync",
        ],
        rows,
    )
    method = (
        f"The orders service alone, its async routes (an AsyncSession on psycopg's async "
        "driver) and the same routes synchronous (`ORDERS_HTTP_ROUTES=sync`), each in a "
        f"process of its own, {data['orders_per_round']} orders per round, {data['reps']} "
        "rounds per client count and routes, interleaved, closed loop; POST/s are medians, "
        "CPU per POST the service process's median (min-max), async / sync the ratio of "
        "medians.\n\n"
    )
    return method + table + "\n" + _footer(data, _service_command(data))


def cluster(data: Mapping[str, Any]) -> str:
    rows = []
    for shape, ratios in zip(data["shapes"], data["ratios_to_baseline"], strict=True):
        saga_run = shape.get("saga")
        rows.append(
            [
                shape["label"],
                _x(ratios["Debezium drain"]),
                _x(ratios["pipeline, batch"]),
                f"{saga_run['p50']:.1f} / {saga_run['p99']:.1f} s" if saga_run else "-",
            ]
        )
    first = data["shapes"][0]["pipeline"]["events_per_second"]
    p = data["params"]
    table = markdown_table(
        [
            "shape",
            "Debezium drain",
            "pipeline, batch handler",
            f"saga p50 / p99 at {p['saga_rate']:g}/s",
        ],
        rows,
    )
    method = (
        f"Each shape started, measured and stopped in turn on the same machine; ratios to the "
        f"first shape (drain {_med(first['Debezium drain alone']):,.0f} events/s, pipeline "
        f"{_med(first['outbox -> Spark inbox, batch handler']):,.0f} events/s), "
        f"{p['events']:,} events per backlog, {p['reps']} repetitions.\n\n"
    )
    return method + table + "\n" + _footer(data, "`./dev.sh bench cluster`")


def scheduled(data: Mapping[str, Any]) -> str:
    p, release = data["params"], data["params"]["release"]
    rows = []
    for rate, runs in data["release_lag"].items():
        rows.append(
            [f"{float(rate):,.0f}/s", f"{runs[0]['messages']:,}"]
            + [
                f"{_reps(list(r[hop] for r in runs), q)} s"
                for hop in ("due_to_committed", "due_to_kafka")
                for q in ("p50", "p99")
            ]
        )
    lag = markdown_table(
        ["due", "messages", "-> outbox p50", "-> outbox p99", "-> Kafka p50", "-> Kafka p99"],
        rows,
    )
    us = data["us_per_event"]
    sizes = sorted({int(k.split()[1]) for k in us})
    cost = markdown_table(
        ["events per transaction", "publish, µs per event", "schedule", "schedule / publish"],
        [
            [
                size,
                _rate(us[f"publish {size}"]),
                _rate(us[f"schedule {size}"]),
                _x(_med(us[f"schedule {size}"]) / _med(us[f"publish {size}"])),
            ]
            for size in sizes
        ],
    )
    method = (
        f"Messages due evenly at each rate for {p['seconds']:g} s, scheduled ahead and released "
        f"by one releaser with the default settings (a pass at least every "
        f"{release['poll_seconds']:g} s, up to {release['batch']} messages per transaction), "
        f"delete mode, {p['reps']} repetitions (ranges are over the repetitions). Lag: from a "
        "message's time to the commit of the transaction that released it, and to its record "
        "read from Kafka (read_committed).\n\n"
    )
    cost_method = (
        f"\nA transaction that schedules its events (due in an hour) next to one that publishes "
        f"them, delete mode, one writer, {p['transactions']:,} transactions of each per "
        "repetition, the four taking turns every 50 transactions; per event: the wall time / "
        "the events, median (min-max) over the repetitions.\n\n"
    )
    given = {"due-seconds": p["seconds"], "transactions": p["transactions"], "reps": p["reps"]}
    defaults = {"due-seconds": 25.0, "transactions": TRANSACTIONS_DEFAULT, "reps": REPS_DEFAULT}
    command = _command("scheduled", given, defaults)
    return method + lag + cost_method + cost + "\n" + _footer(data, command)


# The console's measured paths: the key in the results, the row's label, whether the
# overview's target applies.
CONSOLE_PATHS = (
    ("OverviewReader.read()", "the overview's read (`OverviewReader.read()`)", True),
    ("GET /", "the overview page (GET /)", True),
    ("GET /failures", "failures grouped by cause (GET /failures)", False),
    ("GET /failures/group", "the largest group's first page", False),
    ("GET /events?id=", "where is my event? (a parked record's id)", False),
)
CONSOLE_DEFAULTS = {"parked": 100_000, "partitions": 64, "samples": 30, "idle_seconds": 30.0}


def console_rows(data: Mapping[str, Any]) -> list[list[str]]:
    """Each measured path: p50, p95, max, the target, whether p95 meets it, target / p95."""
    p, rows = data["params"], []
    for key, label, targeted in CONSOLE_PATHS:
        s = data["ms"][key]
        cells = [label, f"{s['p50']:,.1f} ms", f"{s['p95']:,.1f} ms", f"{s['max']:,.1f} ms"]
        if targeted:
            met = "yes" if s["p95"] < p["target_ms"] else "**no**"
            cells += [f"< {p['target_ms']:g} ms", met, _x(p["target_ms"] / s["p95"])]
        else:
            cells += ["", "", ""]
        rows.append(cells)
    return rows


def console_idle(data: Mapping[str, Any]) -> list[str]:
    """The idle console's row: CPU, queries started, the target, whether met, target / CPU."""
    quiet, target = data["idle"], data["params"]["idle_target_percent"]
    cpu = quiet["cpu_percent_of_one_core"]
    met = cpu < target and quiet["queries_started"] == 0
    return [
        f"`outboxkit console`, nobody looking for {quiet['seconds']:.0f} s",
        f"{cpu:.2f}% ({quiet['cpu_seconds']:.2f} s)",
        str(quiet["queries_started"]),
        f"< {target:g}% of a core, no query",
        "yes" if met else "**no**",
        f"{target / cpu:,.0f}" if cpu > 0 else "∞",
    ]


def console(data: Mapping[str, Any]) -> str:
    p = data["params"]
    table = markdown_table(
        ["what", "p50", "p95", "max", "target", "met (p95)", "target / p95"],
        console_rows(data),
    )
    idle = markdown_table(
        ["idle", "CPU, share of one core", "queries started", "target", "met", "target / CPU"],
        [console_idle(data)],
    )
    parts = markdown_table(
        ["the overview's part", "p50", "p95"],
        [
            [name, f"{s['p50']:,.1f} ms", f"{s['p95']:,.1f} ms"]
            for name, s in data["overview_parts_ms"].items()
        ],
    )
    method = (
        f"One consumer of a topic of {p['partitions']} partitions "
        f"({p['lagging_partitions']} of them behind Kafka's end), {p['parked']:,} parked "
        f"records of {p['causes']} causes ({p['retrying']:,} waiting for a retry), Kafka "
        f"Connect {'with its connector' if p['connect'] else 'left out'}; the overview's cache "
        f"off (every read a read); {p['samples']} timed requests of each path after "
        f"{p['warm_up']} untimed, the paths taking turns, through the app served by uvicorn, "
        "signed in."
        + (
            f" The machine's CPUs were {100 * data['load']['cpu_busy_share']:.0f}% busy while "
            "the paths were timed (whatever ran)."
            if "load" in data
            else ""
        )
        + "\n\n"
    )
    heads = data["heads_read"]
    heads_line = (
        f"\nThe overview's read shows how long the oldest record not applied has waited on each "
        f"partition behind: it had that time for {heads['median']:g} of the "
        f"{heads['partitions_behind']} partitions behind at the median read, "
        f"{heads['min']} at the fewest.\n"
    )
    idle_method = (
        f"\n`outboxkit console` in its own process, looked at once, then left alone for "
        f"{p['idle_seconds']:g} s: its CPU (user + system) and the queries its database "
        "sessions started meanwhile.\n\n"
    )
    parts_method = (
        "\nWhere the overview's read goes, each part timed apart as the reader makes it:\n\n"
    )
    flags = {"parked": "--console-parked", "partitions": "--console-partitions"}
    flags |= {"samples": "--console-samples", "idle_seconds": "--console-idle"}
    given = [f"{flags[k]} {p[k]:g}" for k, v in CONSOLE_DEFAULTS.items() if k in p and p[k] != v]
    command = f"`./dev.sh bench {' '.join(['console', *given])}`"
    return (
        method
        + table
        + heads_line
        + idle_method
        + idle
        + parts_method
        + parts
        + "\n"
        + _footer(data, command)
    )


def chaos(data: Mapping[str, Any]) -> str:
    during = all("during_p99" in f for f in data["by_fault"].values())  # recorded since
    rows = [
        [
            f"`{kind}`",
            f["rounds"],
            f"{f['recovery_p50']:.1f} s",
            f"{f['recovery_max']:.1f} s",
            *([f"{f['during_p99']:.1f} s ({f['orders_during']:,})"] if during else []),
        ]
        for kind, f in sorted(data["by_fault"].items())
    ]
    header = ["fault", "rounds", "recovery p50", "max"]
    header += ["p99 of the orders POSTed during it (orders)"] if during else []
    table = markdown_table(header, rows)
    scanned = _scanned(data)
    kafka = f"; {scanned}" if scanned else ""
    summary = (
        f"{len(data['rounds'])} rounds, {data['orders']:,} orders: **{data['lost']} lost, "
        f"{data['duplicates']} duplicate effects, {data['stuck']} stuck**{kafka}; "
        f"{data['unavailable']} client retries; POST -> final {data['latency_p50']:.1f} s p50 / "
        f"{data['latency_p99']:.1f} s p99 over the campaign ({data['baseline']:.1f} s before "
        "the first fault).\n\n"
    )
    return summary + table


def _scanned(checks: Mapping[str, Any]) -> str:
    """What the read_committed reader of the saga's topics found ("" when it did not read)."""
    if checks.get("kafka_duplicates") is None:
        return ""
    return (
        f"{checks['kafka_duplicates']} event ids seen more than once by a read_committed reader "
        f"of the saga's {checks['kafka_records']:,} records"
    )


def _amount(value: float | None, unit: str) -> str:
    """A soak series' value in its unit (bytes as KB/MB/GB)."""
    if value is None:
        return "-"
    if unit == "bytes":
        return _size(value)
    if unit == "% of a core":
        return f"{value:,.1f}%"
    return f"{value:,.1f} {unit}" if unit in ("MiB", "s") else f"{value:,.0f}"


def soak(data: Mapping[str, Any]) -> str:
    """A soak run (`outboxkit dev soak`): the checks, a verdict per series, the faults."""
    p, c = data["params"], data["checks"]
    finals = ", ".join(f"{k} {v:,}" for k, v in sorted(c["by_status"].items()))
    growing = data["growing"]
    scanned = _scanned(c)
    scanned = f"{scanned}; " if scanned else ""
    summary = (
        f"{p['minutes']:g} min at {p['rate']:g} orders/s, a fault every {p['fault_every']:g} "
        f"min ({len(data['faults'])} in all), a sample every {p['sample_seconds']:g} s: "
        f"**{c['lost']} lost, {c['duplicates']} duplicate effects, {c['stuck']} stuck**, "
        f"invariants {'hold' if c['report_ok'] else 'broken'} ({finals}); "
        f"{scanned}{c['unavailable']:,} client retries; POST -> final "
        f"{c['latency_p50']:.1f} s p50 / {c['latency_p99']:.1f} s p99. "
        f"Growing: {', '.join(growing) if growing else 'nothing'}."
        "\n\n" + "".join(f"Problem: {problem}\n\n" for problem in c["problems"])
    )
    rows = [
        [
            f"`{t['series']}`",
            *(_amount(t[k], t["unit"]) for k in ("first", "last", "max")),
            _amount(t["slope_per_hour"], t["unit"]) + " /h",
            f"**{t['verdict']}**" if t["verdict"] == "growing" else t["verdict"],
            f"{_amount(t['bound'], t['unit'])}: {t['bound_why']}" if t["bound"] else "",
        ]
        for t in data["trends"]
        if t["verdict"]
    ]
    series = markdown_table(
        ["series", "first", "last", "max", "2nd-half slope", "verdict", "bound"], rows
    )
    struck = [
        [f"{f['at'] / 60:.1f}", f"`{f['fault']}`", f["struck"], f"{f['recovery']:.1f} s"]
        for f in data["faults"]
    ]
    faults = markdown_table(["at (min)", "fault", "struck", "recovery"], struck)
    command = (
        f"`outboxkit dev soak --minutes {p['minutes']:g} --rate {p['rate']:g} --fault-every "
        f"{p['fault_every']:g} --sample-seconds {p['sample_seconds']:g} --seed {p['seed']}"
        + (
            f" --cpu-settle-minutes {p['cpu_settle_seconds'] / 60:g}"
            if p.get("cpu_settle_seconds", CPU_SETTLE_SECONDS) != CPU_SETTLE_SECONDS
            else ""
        )
        + "`"
    )
    return summary + series + "\n" + faults + "\n" + _footer(data, command)


# Sections `outboxkit dev bench publish` adds to docs/benchmarks.md when their result comes in
# and the page has no block for it yet.
SECTIONS = {
    "soak": """
## Soak

`outboxkit dev soak` runs the saga at a steady rate for an hour with a routine fault every five
minutes (a Postgres crash, a broker restart, Connect's tasks restarted, a kill -9 of the
consumer driver or of a service replica), samples every process, replication slot, inbox and
outbox table and data folder every 15 s, then checks every order, the invariants and the audit.
A series is flat when its growth over the second half is within 5% of its level (and a small
absolute slack), bounded when it stays under what the stack enforces (the bound column), else
growing. How to run it: [Operate](how-to/operate.md#soak-outboxkit-dev-soak).

<!-- figures:soak -->
<!-- /figures -->

![soak: every series over the run, faults in red](benchmarks/soak.png)
""",
}


def profile(data: Mapping[str, Any]) -> str:
    out = []
    for key, what in (("inbox_sink_seconds", "inbox sink"), ("outbox_write_seconds", "outbox")):
        groups = {k: v for k, v in data[key].items() if "(profiled)" not in k}
        wall, cpu = data[key]["wall (profiled)"], data[key]["cpu (profiled)"]
        total = sum(groups.values())
        rows = [[k, f"{v:.2f} s", f"{100 * v / total:.0f}%"] for k, v in groups.items()]
        rows.sort(key=lambda r: -float(r[1].split()[0]))
        out.append(
            f"The {what}: {wall:.1f} s wall, {cpu:.1f} s of it CPU in the Python process.\n\n"
            + markdown_table(["own time in", "seconds", "share"], rows)
        )
    return "\n".join(out) + "\nReproduce: `./dev.sh bench profile`.\n"


def summary(results: Results) -> str:
    """The headline figures of README.md and the home page: one table per machine."""
    rows: dict[str, list[list[str]]] = {}
    for name, render in SUMMARY_ROWS:
        if name in results:
            key = machine(results[name]["machine"])
            rows.setdefault(key, []).extend(render(results[name]))
    tables = [
        f"Machine: {key}, every component on it.\n\n"
        + markdown_table(["what", "figure: median (min-max)", "reproduce"], body)
        for key, body in rows.items()
    ]
    if "chaos" in results:
        c = results["chaos"]
        tables.append(
            f"Fault campaign (`outboxkit dev chaos`): {len(c['rounds'])} rounds, {c['orders']:,} "
            f"orders, {c['lost']} lost, {c['duplicates']} duplicate effects, "
            f"{c['stuck']} stuck.\n"
        )
    return "\n".join(tables)


def _summary_outbox(d: Mapping[str, Any]) -> list[list[str]]:
    tps = d["transactions_per_second"]
    _measured_since("outbox", "async_driver" in d["params"], "the async driver's variants")
    writers = " / ".join(str(w) for w in d["params"]["writers"])
    command = _command("outbox", d["params"], {"transactions": TRANSACTIONS_DEFAULT, "reps": 3})
    rows = []
    for prefix, on in (("", ""), ("async, ", ", AsyncSession")):
        cells = [
            _x(
                _med(tps[f"{w} / {prefix}outbox, delete mode"])
                / _med(tps[f"{w} / {prefix}no outbox"])
            )
            for w in d["params"]["writers"]
        ]
        what = f"outbox write{on}, delete mode, vs none ({writers} writers)"
        rows.append([what, " / ".join(cells), command])
    return rows


def _summary_inbox(d: Mapping[str, Any]) -> list[list[str]]:
    rps, state = d["rows_per_second"], d["state_size"]
    key, what = "inbox, source positions (window 0), batch handler", "by source positions"
    if key not in rps:
        key, what = "inbox, exactly-once source (10,000 window), batch handler", "by offset"
    command = _command("inbox", d["params"], {"events": EVENTS_DEFAULT, "reps": REPS_DEFAULT})
    base = _med(rps["unguarded, batch handler"])
    top = str(max(d["params"]["checkpoints"]))
    held = state.get("source positions", state.get("inbox", {})).get(top, {})
    return [
        [
            f"inbox, batch handler, dedup {what}, rows/s",
            f"{_rate(rps[key])}, {_x(_med(rps[key]) / base)}x no dedup",
            command,
        ],
        [
            f"dedup state at {int(top):,} events",
            f"{_size(held.get('bytes', 0))} (message-id table "
            f"{_size(state['message-id'][top]['bytes'])})",
            command,
        ],
    ]


def _summary_pipeline(d: Mapping[str, Any]) -> list[list[str]]:
    eps = d["events_per_second"]
    batch = eps["outbox -> Spark inbox, batch handler"]
    share = _med(batch) / _med(eps["Debezium drain alone"])
    return [
        [
            "outbox -> Kafka -> Spark inbox, events/s",
            f"{_rate(batch)}, {_x(share)}x the Debezium drain",
            "`./dev.sh bench pipeline`",
        ]
    ]


def _summary_saga(d: Mapping[str, Any]) -> list[list[str]]:
    rows = []
    for rate, runs in d["fixed_rates"].items():
        p99 = [r["p99"] for r in runs]
        rows.append(
            [
                f"saga at {float(rate):g} orders/s, POST -> final",
                f"p50 {statistics.median(r['p50'] for r in runs):.1f} s, "
                f"p99 {statistics.median(p99):.1f} s ({min(p99):.1f}-{max(p99):.1f})",
                "`./dev.sh bench saga`",
            ]
        )
    return rows


def _summary_service(d: Mapping[str, Any]) -> list[list[str]]:
    _measured_since("service", "variants" in d, "the async and sync routes side by side")
    clients = " / ".join(str(c) for c in d["clients"])
    rows = []
    for key, what, fmt, unit in (
        ("posts_per_second", "orders service POST/s", ",.0f", ""),
        ("cpu_ms_per_post", "service CPU per POST", ".1f", " ms"),
    ):
        mine = _service_medians(d, "async", key)
        sync = _service_medians(d, "sync", key)
        rows.append(
            [
                f"{what}, async routes ({clients} clients)",
                " / ".join(format(m, fmt) for m in mine)
                + f"{unit}, "
                + " / ".join(_x(m / s) for m, s in zip(mine, sync, strict=True))
                + "x sync",
                _service_command(d),
            ]
        )
    return rows


SUMMARY_ROWS: tuple[tuple[str, Callable[[Mapping[str, Any]], list[list[str]]]], ...] = (
    ("outbox", _summary_outbox),
    ("inbox", _summary_inbox),
    ("pipeline", _summary_pipeline),
    ("saga", _summary_saga),
    ("service", _summary_service),
)
RENDER: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "outbox": outbox,
    "cdc": cdc,
    "inbox": inbox,
    "pipeline": pipeline,
    "saga": saga,
    "service": service,
    "cluster": cluster,
    "chaos": chaos,
    "chaos-cluster": chaos,
    "chaos-network": chaos,
    "chaos-freeze": chaos,
    "chaos-freeze-again": chaos,
    "chaos-freeze-off": chaos,
    "chaos-freeze-locality": chaos,
    "profile": profile,
    "scheduled": scheduled,
    "soak": soak,
    "console": console,
    "cost": cost_figures.render,
}
