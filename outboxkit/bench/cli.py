"""`outboxkit bench [SCENARIO...]`: run benchmarks on the local stack or on given services."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, make_url, text

from outboxkit.settings import Settings

SCENARIOS = ("outbox", "cdc", "inbox", "pipeline", "saga", "profile")
DATABASE_ONLY = ("outbox", "inbox", "profile")  # Postgres alone; the rest: the stack
BENCH_DATABASE = "outboxkit_bench"


def fresh_database(server_url: str, name: str = BENCH_DATABASE) -> str:
    """Drop and create the benchmark's own database next to ``server_url``'s; returns its URL."""
    url = make_url(server_url)
    admin = create_engine(url.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return url.set(database=name).render_as_string(hide_password=False)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from rich.console import Console

    from devstack.stack import Stack

    console = Console()
    scenarios = args.scenarios or list(SCENARIOS)
    unknown = [s for s in scenarios if s not in SCENARIOS]
    if unknown:
        console.print(f"unknown scenario {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}")
        return 2
    stack = Stack(settings, echo=lambda line: None)
    started: Stack | None = None
    needs_stack = any(s not in DATABASE_ONLY for s in scenarios) or not (
        args.url or settings.database_url
    )
    if needs_stack:
        if stack.status().get("up") is not True:
            started = stack
        print("[bench] starting the stack (Postgres, broker, Kafka Connect + Debezium)", flush=True)
        stack.up()
    try:
        server = args.url or settings.database_url or stack.database_url()
        return _run_scenarios(args, console, scenarios, stack, server)
    finally:
        if started is not None and not args.keep_stack:
            started.down()


def _run_scenarios(
    args: argparse.Namespace, console: Any, scenarios: list[str], stack: Any, server: str
) -> int:
    from rich.markdown import Markdown

    from outboxkit.bench import cdc, inbox, profile, report, saga, writes

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
            data, markdown = cdc.pipeline(stack, out, events=args.events, reps=reps)
        else:
            data, markdown = saga.run(
                stack,
                out,
                reps=min(reps, 2),
                rates=args.rates,
                duration=args.duration,
                steps=args.steps,
                step_seconds=args.step_seconds,
            )
        console.print(Markdown(markdown))
        for path in report.write(out, scenario, data, markdown):
            console.print(f"wrote {path}")
        for plot in data.get("plots", []):
            console.print(f"wrote {plot}")
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = sub.add_parser(
        "bench",
        help="benchmarks: figures and ratios printed and written (JSON, markdown, PNG)",
        description="Scenarios: outbox (write overhead), cdc (commit -> Kafka vs raw produce), "
        "inbox (sink rows/s and dedup-state size), pipeline (outbox -> Spark inbox vs Debezium "
        "drain), saga (latency at fixed rates, capacity under a step load), profile (where "
        "the inbox sink's time goes). Default: all.",
    )
    bench.add_argument("scenarios", nargs="*", metavar="SCENARIO", help=", ".join(SCENARIOS))
    bench.add_argument(
        "--url", help="a Postgres server for outbox and inbox (default: settings, local stack)"
    )
    bench.add_argument("--out", default="bench-results", help="folder for JSON, markdown, PNG")
    bench.add_argument("--reps", type=int, default=3, help="repetitions of each measurement")
    bench.add_argument(
        "--events", type=int, default=20_000, help="events per cdc/inbox/pipeline measurement"
    )
    bench.add_argument(
        "--transactions", type=int, default=2000, help="transactions per outbox measurement"
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
    bench.add_argument("--keep-stack", action="store_true", help="leave a stack it started up")
    bench.set_defaults(run=run)
