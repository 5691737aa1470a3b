"""`outboxkit saga` and `outboxkit chaos`: the saga's processes as an operator runs them (start,
stop, restart, status, each recorded with PID, port and log) and the fault campaign on them."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from devstack.settings import StackSettings


def progress(line: str) -> None:
    """A progress line on stderr, so that stdout holds only the command's report."""
    print(line, file=sys.stderr, flush=True)


def recorded_saga(stack: Any) -> Any:
    """The saga whose processes are recorded in the stack's directory, if any."""
    from saga_harness.processes import Saga

    workdir = stack.dir / "saga"
    if not (workdir / "processes.json").exists() or not stack.state_file.exists():
        return None
    return Saga.attach(stack, workdir, echo=stack.echo)


def service_replicas(stack: Any) -> int:
    """The stack's replica count per saga service (setting service_replicas; 1 without it)."""
    return int(getattr(stack.settings, "service_replicas", 1))


def saga_command(args: argparse.Namespace, settings: StackSettings) -> int:
    """`outboxkit saga ACTION [NAME...]`: prepare, up, status, start, stop, restart or kill -9;
    a NAME is a process: a service replica (orders, orders-2, ...) or the consumer driver."""
    from devstack.stack import Stack
    from saga_harness.processes import Saga, service_of

    stack = Stack(settings, echo=progress)  # stdout carries the report (--json) alone
    unknown = sorted(n for n in args.names if n != "consumers" and service_of(n) is None)
    if unknown:
        raise ValueError(
            f"unknown saga process(es) {unknown}: choose from orders, payments, shipping (a "
            "replica: orders-2, ...) and consumers"
        )
    if args.action == "prepare":
        # Set-up only, as a deployment's one-shot job runs it: roles, databases, migrations,
        # connectors, topics. Its processes run elsewhere (containers), with their own roles.
        stack.up()
        Saga(stack, stack.dir / "saga", echo=progress).prepare()
        progress("saga prepared: service roles and databases, migrations, connectors, topics")
        return 0
    if args.action == "up":
        stack.up()
        saga = recorded_saga(stack)
        if saga is None:
            saga = Saga(stack, stack.dir / "saga", echo=progress)
            saga.prepare()
        saga.scale(service_replicas(stack))  # the setting's count, a recorded saga's too
        names = args.names or saga.processes
        saga.start(names)
        if "orders" in names and "consumers" in names:
            saga.warm_up()
    else:
        saga = recorded_saga(stack)
        if saga is None:
            raise LookupError(f"no saga recorded in {stack.dir / 'saga'}: outboxkit saga up")
        names = args.names or saga.processes
        if args.action == "start":
            saga.start(names)
        elif args.action == "stop":
            saga.stop(names, dispose=False)
        elif args.action == "restart":
            saga.restart(names)
        elif args.action == "kill":
            for name in names:
                saga.kill(name)
    processes = saga.status()
    if args.json:
        print(json.dumps(processes, indent=2))
    else:
        print_processes(processes)
    return 0 if all(p["health"] in ("ready", "running", "stopped") for p in processes) else 1


def chaos_command(args: argparse.Namespace, settings: StackSettings) -> int:
    """`outboxkit chaos`: the fault campaign on the recorded saga (brought up when absent)."""
    from rich.console import Console

    from devstack.stack import Stack
    from outboxkit.bench.report import markdown_table, write
    from saga_harness import chaos, faults
    from saga_harness.processes import Saga, drop_checkpoints

    console = Console()
    echo: Callable[[str], None] = lambda line: console.print(f"[dim]{line}[/dim]")  # noqa: E731
    # Checked against the shape the settings give, before anything starts.
    shape = faults.Shape.of(settings)
    kinds = faults.check(args.kinds or faults.offered(shape), shape)
    stack = Stack(settings, echo=echo)
    stack.up()
    saga = recorded_saga(stack) or Saga(stack, stack.dir / "saga", echo=echo)
    saga.echo = echo
    try:
        if not saga.database_urls:
            saga.prepare()
        saga.scale(service_replicas(stack))
        saga.start()
        saga.warm_up()
        console.rule(
            f"chaos: {args.rounds} rounds over {args.orders} orders at {args.rate}/s "
            f"(seed {args.seed})"
        )
        campaign = chaos.run(
            stack,
            saga,
            rounds=args.rounds,
            orders=args.orders,
            rate=args.rate,
            seed=args.seed,
            gap=(args.gap_min, args.gap_max),
            kinds=kinds,
            echo=echo,
        )
    finally:
        if not args.keep_running:
            saga.stop()
            stack.down()
            drop_checkpoints(saga.workdir)
    markdown = _chaos_markdown(campaign, markdown_table)
    console.print(markdown, markup=False)
    if args.out:
        for path in write(Path(args.out), "chaos", campaign.as_dict(), markdown):
            print(f"wrote {path}")
    return 0 if campaign.ok else 1


def _chaos_markdown(campaign: Any, markdown_table: Callable[..., str]) -> str:
    """The campaign's tables: totals, per fault kind, per round."""
    totals = [
        ["rounds", len(campaign.rounds)],
        ["orders (with one probe per round)", f"{campaign.orders:,}"],
        ["final states", ", ".join(f"{k} {v:,}" for k, v in sorted(campaign.by_status.items()))],
        ["stuck (not final)", campaign.stuck],
        ["lost events (audit)", campaign.lost],
        ["duplicate effects (audit + saga checks)", campaign.duplicates],
        ["client retries (503 / no connection)", f"{campaign.unavailable:,}"],
        [
            "POST -> final latency p50 / p99",
            f"{campaign.latency(0.5):.1f} s / {campaign.latency(0.99):.1f} s",
        ],
        ["probe latency without faults", f"{campaign.baseline:.1f} s"],
        ["duration", f"{campaign.duration / 60:.1f} min"],
        ["verdict", "OK" if campaign.ok else "FAILED"],
        *(["problem", problem] for problem in campaign.problems),
    ]
    kinds = [
        [kind, v["rounds"], f"{v['recovery_p50']:.1f}", f"{v['recovery_max']:.1f}"]
        for kind, v in campaign.by_fault().items()
    ]
    rounds = [
        [r.number, f"{r.at:.0f}", r.fault, r.struck, f"{r.injected:.1f}", f"{r.recovery:.1f}"]
        for r in campaign.rounds
    ]
    return (
        markdown_table(["", "value"], totals)
        + "\n"
        + markdown_table(["fault", "rounds", "recovery p50 (s)", "recovery max (s)"], kinds)
        + "\n"
        + markdown_table(
            ["round", "at (s)", "fault", "struck", "fault + repair (s)", "recovery (s)"], rounds
        )
    )


def print_processes(processes: Sequence[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="saga processes")
    for column in ("process", "service", "pid", "port", "health", "url", "log"):
        table.add_column(column)
    for p in processes:
        table.add_row(
            p["name"],
            p["service"],
            str(p["pid"] or ""),
            str(p["port"] or ""),
            p["health"],
            p["url"] or "",
            p["log"],
        )
    Console().print(table)


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``saga`` and ``chaos`` commands."""
    from saga_harness import faults  # light: the kinds' catalogue, for the --kinds help

    saga = sub.add_parser(
        "saga",
        help="the saga's services and consumer driver: prepare (set-up only), up, status, start, "
        "stop, restart",
    )
    saga.add_argument(
        "action", choices=["prepare", "up", "status", "start", "stop", "restart", "kill"]
    )
    saga.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help="processes: orders, payments, shipping (replica 1 of each), orders-2 ... (other "
        "replicas: setting service_replicas), consumers (default: all)",
    )
    saga.add_argument("--json", action="store_true")
    saga.set_defaults(run=saga_command, settings=StackSettings)

    chaos = sub.add_parser(
        "chaos",
        help="a fault campaign on the saga: kill -9s of its processes and the stack's nodes "
        "(on a cluster: partition leaders, coordinators, workers), Postgres crashes, broker "
        "restarts, while orders flow; then every invariant and the audit",
        formatter_class=argparse.RawTextHelpFormatter,  # the --kinds help: one kind a line
    )
    chaos.add_argument("--rounds", type=int, default=50)
    chaos.add_argument("--orders", type=int, default=10_000)
    chaos.add_argument("--rate", type=float, default=10.0, help="orders per second")
    chaos.add_argument("--seed", type=int, default=1)
    chaos.add_argument("--gap-min", type=float, default=2.0, help="seconds between rounds, min")
    chaos.add_argument("--gap-max", type=float, default=8.0, help="seconds between rounds, max")
    chaos.add_argument(
        "--kinds",
        nargs="*",
        metavar="KIND",
        help="fault kinds (default: every kind the stack's shape offers):\n" + faults.help_lines(),
    )
    chaos.add_argument("--out", help="write chaos.json and chaos.md into this folder")
    chaos.add_argument("--keep-running", action="store_true", help="leave the stack and saga up")
    chaos.set_defaults(run=chaos_command, settings=StackSettings)
