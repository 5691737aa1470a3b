"""`outboxkit dev bench [SCENARIO...]`: run benchmarks on the local stack or on given services."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from outboxkit.parsers import SubParsers, command
from outboxkit_workshop.commands import stack_settings

if TYPE_CHECKING:
    from outboxkit_workshop.devstack.settings import StackSettings

SCENARIOS = (
    "outbox",
    "cdc",
    "inbox",
    "pipeline",
    "saga",
    "service",
    "profile",
    "scheduled",
    "console",
    "cost",
    "cluster",
)
DEFAULT = SCENARIOS[:-1]  # cluster starts a stack per shape (about 20 min): only when named
DATABASE_ONLY = ("outbox", "inbox", "profile")  # Postgres alone
OWN_STACKS = ("cluster",)  # stacks of its own; the rest: the settings' stack
BENCH_DATABASE = "outboxkit_bench"


# The cost scenario's levers by key (`outboxkit_workshop.bench.cost.LEVERS`, which a unit test
# holds to these): named here to check --cost-levers when it is parsed, before any stack starts.
COST_LEVERS = ("poll", "trigger", "boundary", "hadoop-fs", "c1")


def cost_levers(text: str) -> list[str]:
    """``--cost-levers``: comma-separated keys of `COST_LEVERS`, at least one."""
    keys = [k.strip() for k in text.split(",") if k.strip()]
    unknown = sorted(set(keys) - set(COST_LEVERS))
    if not keys or unknown:
        raise argparse.ArgumentTypeError(
            f"expected keys among {', '.join(COST_LEVERS)}, got {text!r}"
        )
    return keys


def fresh_database(server_url: str, name: str = BENCH_DATABASE) -> str:
    """Drop and create the benchmark's own database next to ``server_url``'s; returns its URL."""
    from sqlalchemy import create_engine, make_url, text

    url = make_url(server_url)
    admin = create_engine(url.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return url.set(database=name).render_as_string(hide_password=False)


def _shape(text: str) -> Any:
    from outboxkit_workshop.bench.cluster import parse_shape

    try:
        return parse_shape(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def run(args: argparse.Namespace, settings: StackSettings) -> int:
    from rich.console import Console

    from outboxkit_workshop.devstack.stack import Stack

    if args.scenarios[:1] == ["publish"]:
        from outboxkit_workshop.bench import publish

        return publish.run(args)
    console = Console()
    scenarios = args.scenarios or list(DEFAULT)
    unknown = [s for s in scenarios if s not in SCENARIOS]
    if unknown:
        console.print(f"unknown scenario {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}")
        return 2
    stack = Stack(settings, echo=lambda line: None)
    started: Stack | None = None
    shared = [s for s in scenarios if s not in OWN_STACKS]
    needs_stack = bool(shared) and (
        any(s not in DATABASE_ONLY for s in shared) or not (args.url or settings.database_url)
    )
    if needs_stack:
        if stack.status().get("up") is not True:
            started = stack
        print("[bench] starting the stack (Postgres, broker, Kafka Connect + Debezium)", flush=True)
        stack.up()
    try:
        server = args.url or settings.database_url or (stack.database_url() if needs_stack else "")
        return _run_scenarios(args, console, scenarios, stack, server, settings)
    finally:
        if started is not None and not args.keep_stack:
            started.down()


def _run_scenarios(
    args: argparse.Namespace,
    console: Any,
    scenarios: list[str],
    stack: Any,
    server: str,
    settings: StackSettings,
) -> int:
    from rich.markdown import Markdown

    from outboxkit_workshop.bench import (
        cdc,
        cost,
        inbox,
        operator_console,
        profile,
        report,
        saga,
        scheduled,
        service,
        writes,
    )

    out = Path(args.out)
    reps = args.reps
    for scenario in scenarios:
        print(f"[bench] scenario {scenario}", flush=True)
        if scenario == "outbox":
            data, markdown = writes.run(
                fresh_database(server), out, transactions=args.transactions, reps=reps
            )
        elif scenario == "inbox":
            data, markdown = inbox.run(
                fresh_database(server), out, events=args.events, reps=reps, checkpoints=args.sizes
            )
        elif scenario == "profile":
            data, markdown = profile.run(
                fresh_database(server), out, events=args.events, transactions=args.transactions
            )
        elif scenario == "cdc":
            data, markdown = cdc.cdc(stack, out, events=args.events, reps=reps)
        elif scenario == "pipeline":
            data, markdown = cdc.pipeline(
                stack, out, events=args.events, reps=reps, flame_events=60
            )
        elif scenario == "service":
            data, markdown = service.run(stack, out, reps=reps, orders=args.orders)
        elif scenario == "scheduled":
            data, markdown = scheduled.run(
                stack,
                fresh_database(server),
                out,
                rates=args.due_rates,
                seconds=args.due_seconds,
                transactions=args.transactions,
                reps=reps,
            )
        elif scenario == "console":
            data, markdown = operator_console.run(
                stack,
                fresh_database(server),
                out,
                parked=args.console_parked,
                partitions=args.console_partitions,
                samples=args.console_samples,
                idle_seconds=args.console_idle,
            )
        elif scenario == "cost":
            data, markdown = cost.run(
                stack,
                out,
                reps=min(reps, 2),
                seconds=args.cost_seconds,
                idle_seconds=args.cost_idle,
                levers=args.cost_levers,
            )
        elif scenario == "cluster":
            data, markdown = _cluster(args, settings, out)
        else:
            data, markdown = saga.run(
                stack,
                out,
                reps=min(reps, 2),
                rates=args.rates,
                duration=args.duration,
                steps=args.steps,
                step_seconds=args.step_seconds,
                **({"trigger": args.trigger} if args.trigger is not None else {}),
            )
        console.print(Markdown(markdown))
        for path in report.write(out, scenario, data, markdown):
            console.print(f"wrote {path}")
        for plot in data.get("plots", []):
            console.print(f"wrote {plot}")
    return 0


def _cluster(
    args: argparse.Namespace, settings: StackSettings, out: Path
) -> tuple[dict[str, Any], str]:
    """The cluster scenario at its default sizes, or --quick's, or the ones given."""
    from outboxkit_workshop.bench import cluster

    shapes = args.shapes or (cluster.QUICK_SHAPES if args.quick else cluster.SHAPES)
    sizes = cluster.QUICK if args.quick else cluster.Sizes(reps=min(args.reps, 2))
    given = {
        "events": args.cluster_events,
        "saga_rate": args.cluster_rate,
        "saga_duration": args.cluster_duration,
    }
    sizes = dataclasses.replace(sizes, **{k: v for k, v in given.items() if v is not None})
    return cluster.run(settings, out, shapes=shapes, sizes=sizes, workdir=args.cluster_dir)


def add_parser(sub: SubParsers) -> None:
    bench = command(
        sub,
        "bench",
        run,
        settings=stack_settings,
        help="benchmarks: figures and ratios printed and written (JSON, markdown, PNG)",
        description="Scenarios: outbox (write overhead, on a Session and on an AsyncSession), "
        "cdc (commit -> Kafka vs raw produce), "
        "inbox (sink rows/s and dedup-state size), pipeline (outbox -> Spark inbox vs Debezium "
        "drain), saga (latency at fixed rates, capacity under a step load), service (the orders "
        "service alone, its async routes against the same routes synchronous: POSTs/s and CPU "
        "per POST at 1, 16 and 64 clients, a flame graph with py-spy), profile (where "
        "the inbox sink's time goes), scheduled (a scheduled message's lag from its time to the "
        "outbox and to Kafka at 100 and 1,000 due/s, and what scheduling costs next to "
        "publishing), console (the operator console over 100,000 parked records on 64 "
        "partitions: the overview's read and its pages' answers, p50 / p95 against the "
        "overview's 200 ms, and `outboxkit console`'s CPU while nobody looks), cost (the "
        "saga's CPU per order and at idle, per component, at 10, 50, 100 and 200 orders/s, "
        "with the consumers' trigger, Debezium's poll interval and the consumer JVM's JIT "
        "measured beside the defaults; about 25 min), cluster (the "
        "pipeline and the saga on stacks of several "
        "shapes, each started and stopped in turn: 1 vs 3 brokers, Spark local[2] vs 1 and 2 "
        "workers, 4 vs 8 partitions; about 20 min). Default: all but cluster. "
        "`outboxkit dev bench publish` renders the figure tables of README.md, docs/index.md and "
        "docs/benchmarks.md from the results in docs/benchmarks/.",
    )
    bench.add_argument(
        "scenarios", nargs="*", metavar="SCENARIO", help=", ".join(SCENARIOS) + "; or publish"
    )
    bench.add_argument(
        "--url", help="a Postgres server for outbox and inbox (default: settings, local stack)"
    )
    bench.add_argument("--out", default="bench-results", help="folder for JSON, markdown, PNG")
    bench.add_argument("--reps", type=int, default=3, help="repetitions of each measurement")
    bench.add_argument(
        "--events", type=int, default=20_000, help="events per cdc/inbox/pipeline measurement"
    )
    bench.add_argument(
        "--transactions",
        type=int,
        default=2000,
        help="transactions per outbox and scheduled-cost measurement",
    )
    bench.add_argument(
        "--orders",
        type=int,
        default=600,
        help="POSTs per service measurement (each routes variant, each client count)",
    )
    bench.add_argument(
        "--sizes",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[10_000, 100_000, 1_000_000],
        help="comma-separated event counts at which to report the inbox dedup-state size",
    )
    bench.add_argument(
        "--steps",
        type=lambda s: tuple(float(x) for x in s.split(",")),
        default=(25.0, 50.0, 100.0, 200.0, 400.0),
        help="comma-separated saga step-load rates, orders/s (stops at the first not held)",
    )
    bench.add_argument("--step-seconds", type=float, default=60.0, help="seconds per step")
    bench.add_argument(
        "--rates",
        type=lambda s: tuple(float(x) for x in s.split(",")),
        default=(10.0, 50.0),
        help="comma-separated fixed saga rates, orders/s",
    )
    bench.add_argument("--duration", type=float, default=20.0, help="saga fixed-rate seconds")
    bench.add_argument(
        "--trigger",
        type=float,
        help="saga: the consumers' seconds between micro-batches (default: the saga's, 0.25)",
    )
    bench.add_argument(
        "--due-rates",
        type=lambda s: tuple(float(x) for x in s.split(",")),
        default=(100.0, 1000.0),
        help="comma-separated rates of scheduled messages coming due, per second",
    )
    bench.add_argument(
        "--due-seconds", type=float, default=25.0, help="seconds each due rate is held"
    )
    bench.add_argument("--keep-stack", action="store_true", help="leave a stack it started up")
    console = bench.add_argument_group("console scenario")
    console.add_argument(
        "--console-parked", type=int, default=100_000, help="parked records (default 100,000)"
    )
    console.add_argument(
        "--console-partitions", type=int, default=64, help="the topic's partitions (default 64)"
    )
    console.add_argument(
        "--console-samples", type=int, default=30, help="timed requests of each path (default 30)"
    )
    console.add_argument(
        "--console-idle",
        type=float,
        default=30.0,
        help="seconds the console process is left alone while its CPU is measured (default 30)",
    )
    cost = bench.add_argument_group("cost scenario")
    cost.add_argument(
        "--cost-seconds", type=float, default=20.0, help="seconds each rate is held (default 20)"
    )
    cost.add_argument(
        "--cost-levers",
        type=cost_levers,
        help=f"the levers measured beside the defaults, comma-separated keys: "
        f"{', '.join(COST_LEVERS)} (default: every one)",
    )
    cost.add_argument(
        "--cost-idle", type=float, default=30.0, help="seconds of idle measured (default 30)"
    )
    cluster = bench.add_argument_group("cluster scenario")
    cluster.add_argument(
        "--quick",
        action="store_true",
        help="two shapes (k1-s0-p4, k3-s2-p4), a backlog of 2,000 events once, the saga for 5 s",
    )
    cluster.add_argument(
        "--shapes",
        type=lambda s: tuple(_shape(x) for x in s.split(",")),
        help="comma-separated shapes k<brokers>-s<spark workers>-p<partitions>[-nosaga], the "
        "baseline first (default: k1-s0-p4,k3-s0-p4,k3-s2-p4,k3-s1-p4-nosaga,k3-s2-p8; "
        "the baseline's pipeline is measured again last, but with --quick)",
    )
    cluster.add_argument(
        "--cluster-events", type=int, help="pipeline backlog per shape (default 20,000)"
    )
    cluster.add_argument("--cluster-rate", type=float, help="saga orders/s (default 20)")
    cluster.add_argument(
        "--cluster-duration", type=float, help="saga seconds per shape (default 20)"
    )
    cluster.add_argument(
        "--cluster-dir",
        type=Path,
        help="where the shapes' stacks go (default: the system's temporary directory)",
    )
    published = bench.add_argument_group("publish")
    published.add_argument(
        "--from",
        dest="source",
        type=Path,
        help="copy a run's results and plots from this folder into docs/benchmarks/ first",
    )
    published.add_argument(
        "--check", action="store_true", help="only say which pages' figures are stale (exit 1)"
    )
