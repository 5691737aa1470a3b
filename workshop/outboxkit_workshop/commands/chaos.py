"""`outboxkit dev chaos`: the fault campaign on the saga example (brought up when absent), then
every invariant and the audit."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from outboxkit.parsers import SubParsers, command
from outboxkit_workshop.commands import stack_settings
from outboxkit_workshop.commands.saga import recorded_saga, service_replicas

if TYPE_CHECKING:
    from outboxkit_workshop.devstack.settings import StackSettings
    from outboxkit_workshop.devstack.stack import Stack
    from outboxkit_workshop.saga_harness.processes import Saga


def dim_echo(console: Any) -> Callable[[str], None]:
    """Progress lines, dimmed, printed as they are: a ``[sup]`` prefix or a ``topic[1]`` is
    text, not rich markup."""
    from rich.markup import escape

    return lambda line: console.print(f"[dim]{escape(line)}[/dim]")


def chaos_command(args: argparse.Namespace, settings: StackSettings) -> int:
    """`outboxkit dev chaos`: the fault campaign on the recorded saga (brought up when absent)."""
    from rich.console import Console

    from outboxkit_workshop.bench.report import markdown_table, write
    from outboxkit_workshop.saga_harness import chaos, faults

    console = Console()
    echo = dim_echo(console)
    # Checked against the shape the settings give, before anything starts.
    shape = faults.Shape.of(settings)
    kinds = faults.check(args.kinds or faults.offered(shape), shape)
    with saga_up(settings, echo, keep_running=args.keep_running) as (stack, saga):
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
    markdown = _chaos_markdown(campaign, markdown_table)
    console.print(markdown, markup=False)
    if args.out:
        for path in write(Path(args.out), "chaos", campaign.as_dict(), markdown):
            print(f"wrote {path}")
    return 0 if campaign.ok else 1


@contextlib.contextmanager
def saga_up(
    settings: StackSettings, echo: Callable[[str], None], *, keep_running: bool
) -> Iterator[tuple[Stack, Saga]]:
    """The stack and the recorded saga (brought up when absent), warmed up, for the block;
    then both stopped (their data removed), unless ``keep_running``."""
    from outboxkit_workshop.demo import DEMO_TIMING
    from outboxkit_workshop.devstack.stack import Stack
    from outboxkit_workshop.saga_harness.processes import Saga, drop_checkpoints

    stack = Stack(settings, echo=echo)
    stack.up()
    # A new saga times orders out and holds a share of payments past the timeout, so a run
    # exercises late replies too (as the demo does).
    saga = recorded_saga(stack) or Saga(stack, stack.dir / "saga", echo=echo, **DEMO_TIMING)
    saga.echo = echo
    try:
        if not saga.database_urls:
            saga.prepare()
        saga.scale(service_replicas(stack))
        saga.start()
        saga.warm_up()
        yield stack, saga
    finally:
        if not keep_running:
            saga.stop()
            stack.down()
            drop_checkpoints(saga.workdir)


def _chaos_markdown(campaign: Any, markdown_table: Callable[..., str]) -> str:
    """The campaign's tables: totals, per fault kind, per round."""
    totals = [
        ["rounds", len(campaign.rounds)],
        ["orders (with one probe per round)", f"{campaign.orders:,}"],
        ["final states", ", ".join(f"{k} {v:,}" for k, v in sorted(campaign.by_status.items()))],
        ["stuck (not final)", campaign.stuck],
        ["lost events (audit)", campaign.lost],
        ["duplicate effects (audit + saga checks)", campaign.duplicates],
        [
            "duplicate event ids in Kafka (read_committed reader)",
            "not scanned (at-least-once connectors)"
            if campaign.kafka_duplicates is None
            else f"{campaign.kafka_duplicates} of {campaign.kafka_records:,} records",
        ],
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
        [
            kind,
            v["rounds"],
            f"{v['recovery_p50']:.1f}",
            f"{v['recovery_max']:.1f}",
            v["orders_during"],
            f"{v['during_p99']:.1f}",
        ]
        for kind, v in campaign.by_fault().items()
    ]
    rounds = [
        [r.number, f"{r.at:.0f}", r.fault, r.struck, f"{r.injected:.1f}", f"{r.recovery:.1f}"]
        for r in campaign.rounds
    ]
    return (
        markdown_table(["", "value"], totals)
        + "\n"
        + markdown_table(
            [
                "fault",
                "rounds",
                "recovery p50 (s)",
                "recovery max (s)",
                "orders during it",
                "their p99 (s)",
            ],
            kinds,
        )
        + "\n"
        + markdown_table(
            ["round", "at (s)", "fault", "struck", "fault + repair (s)", "recovery (s)"], rounds
        )
    )


def add_parser(sub: SubParsers) -> None:
    from outboxkit_workshop.saga_harness import (
        faults,  # light: the kinds' catalogue, for the --kinds help
    )

    chaos = command(
        sub,
        "chaos",
        chaos_command,
        help="a fault campaign on the saga: kill -9s of its processes and the stack's nodes "
        "(on a cluster: partition leaders, coordinators, workers), Postgres crashes, broker "
        "restarts, while orders flow; then every invariant and the audit",
        settings=stack_settings,
    )
    chaos.add_argument("--rounds", type=int, default=50, help="fault rounds")
    chaos.add_argument("--orders", type=int, default=10_000, help="orders placed in all")
    chaos.add_argument("--rate", type=float, default=10.0, help="orders per second")
    chaos.add_argument("--seed", type=int, default=1, help="seed of the faults' choice and timing")
    chaos.add_argument("--gap-min", type=float, default=2.0, help="seconds between rounds, min")
    chaos.add_argument("--gap-max", type=float, default=8.0, help="seconds between rounds, max")
    chaos.add_argument(
        "--kinds",
        nargs="*",
        metavar="KIND",
        # argparse formats help with %: a kind's "1% loss" must reach it as "1%% loss".
        help="fault kinds (default: every kind the stack's shape offers):\n"
        + faults.help_lines().replace("%", "%%"),
    )
    chaos.add_argument("--out", help="write chaos.json and chaos.md into this folder")
    chaos.add_argument("--keep-running", action="store_true", help="leave the stack and saga up")
