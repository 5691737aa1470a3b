"""`outboxkit bench SCENARIO...`: run benchmarks on the local stack or on given services."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, make_url, text

from outboxkit.settings import Settings

SCENARIOS = ("inbox",)
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
    server = args.url or settings.database_url
    started: Stack | None = None
    if server is None:
        stack = Stack(settings, echo=lambda line: None)
        if stack.status().get("up") is not True:
            started = stack
        with console.status("starting the local stack..."):
            stack.up()
        server = stack.database_url()
    try:
        return _run_scenarios(args, console, fresh_database(server))
    finally:
        if started is not None and not args.keep_stack:
            started.down()


def _run_scenarios(args: argparse.Namespace, console: Any, url: str) -> int:
    from rich.markdown import Markdown

    from outboxkit.bench import inbox, report

    out = Path(args.out)
    for scenario in args.scenarios or SCENARIOS:
        if scenario == "inbox":
            data, markdown = inbox.run(
                url, events=args.events, reps=args.reps, checkpoints=args.sizes
            )
        else:
            raise ValueError(f"unknown scenario {scenario!r}; choose from {', '.join(SCENARIOS)}")
        console.print(Markdown(markdown))
        for path in report.write(out, scenario, data, markdown):
            console.print(f"wrote {path}")
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = sub.add_parser("bench", help="benchmarks (figures printed and written, not asserted)")
    bench.add_argument("scenarios", nargs="*", metavar="SCENARIO", help=", ".join(SCENARIOS))
    bench.add_argument("--url", help="a Postgres server to use (default: settings, local stack)")
    bench.add_argument("--out", default="bench-results", help="folder for JSON and markdown")
    bench.add_argument("--events", type=int, default=20_000, help="events per rows/s run")
    bench.add_argument("--reps", type=int, default=3)
    bench.add_argument(
        "--sizes",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[10_000, 100_000, 1_000_000],
        help="comma-separated event counts at which to report dedup-state size",
    )
    bench.add_argument("--keep-stack", action="store_true", help="leave a stack it started up")
    bench.set_defaults(run=run)
