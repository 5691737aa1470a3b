"""`outboxkit dev soak`: the saga at a steady rate for a long run with a routine fault every few
minutes, everything sampled; then every invariant, the audit and whether anything grows."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from outboxkit.parsers import SubParsers, command
from outboxkit_workshop.commands import stack_settings
from outboxkit_workshop.commands.chaos import dim_echo, saga_up

if TYPE_CHECKING:
    from outboxkit_workshop.devstack.settings import StackSettings

# The plot's panels: one per family of series.
PANELS = (
    "rss",
    "shared",
    "fds",
    "threads",
    "cpu",
    "cpu warming",
    "slot lag",
    "table bytes",
    "table rows",
    "folder bytes",
    "folder files",
    "orders",
    "latency",
)


def soak_command(args: argparse.Namespace, settings: StackSettings) -> int:
    """`outboxkit dev soak`: a soak run on the recorded saga (brought up when absent)."""
    from rich.console import Console

    from outboxkit_workshop.bench.figures import soak as soak_markdown
    from outboxkit_workshop.bench.report import machine, write
    from outboxkit_workshop.saga_harness import soak

    console = Console()
    echo = dim_echo(console)
    with saga_up(settings, echo, keep_running=args.keep_running) as (stack, saga):
        console.rule(
            f"soak: {args.minutes:g} min at {args.rate:g} orders/s, a fault every "
            f"{args.fault_every:g} min, a sample every {args.sample_seconds:g} s (seed {args.seed})"
        )
        result = soak.run(
            stack,
            saga,
            minutes=args.minutes,
            rate=args.rate,
            fault_every=args.fault_every,
            sample_seconds=args.sample_seconds,
            seed=args.seed,
            echo=echo,
            cpu_settle_seconds=60 * args.cpu_settle_minutes,
        )
        data = {**result.as_dict(), "machine": machine(stack.database_url())}
    markdown = soak_markdown(data)
    console.print(markdown, markup=False)
    if args.out:
        out = Path(args.out)
        for path in [*write(out, "soak", data, markdown), plot(out / "soak.png", data)]:
            print(f"wrote {path}")
    return 0 if result.ok else 1


def plot(path: Path, data: Mapping[str, Any]) -> Path:
    """A grid of small time-series plots, one per family of series (bytes in MiB), the faults'
    times marked as vertical lines."""
    from outboxkit_workshop.bench.report import _pyplot
    from outboxkit_workshop.saga_harness.trend import FAMILIES, MIB

    plt = _pyplot()
    columns = 3
    rows = -(-len(PANELS) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(15, 3.2 * rows), dpi=100, squeeze=False)
    minutes = [t / 60 for t in data["times"]]
    faults = [(f["at"] / 60, f["fault"]) for f in data["faults"]]
    for ax, panel in zip(axes.flat, PANELS, strict=False):
        family = FAMILIES[panel]
        scale, unit = (MIB, "MiB") if family.unit == "bytes" else (1, family.unit)
        for name, values in data["series"].items():
            if name.split(":", 1)[0] != panel:
                continue
            points = [(m, v / scale) for m, v in zip(minutes, values, strict=True) if v is not None]
            ax.plot([m for m, _ in points], [v for _, v in points], lw=1, label=name.split(":")[1])
        for at, _kind in faults:
            ax.axvline(at, color="tab:red", ls="--", lw=0.8, alpha=0.7)
        ax.set_title(f"{family.title} ({unit})", fontsize=9)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=5, ncol=2, loc="upper left")
    for ax in axes.flat[len(PANELS) :]:
        ax.axis("off")
    for ax in axes[-1]:
        ax.set_xlabel("minutes (red: faults)", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def add_parser(sub: SubParsers) -> None:
    soak = command(
        sub,
        "soak",
        soak_command,
        help="a soak run of the saga: orders at a steady rate for a long time with a routine "
        "fault every few minutes (Postgres crash, broker restart, Connect tasks restarted, kill "
        "-9 of the consumer driver or a service replica), every process, slot, table and data "
        "folder sampled; then every invariant, the audit, and a verdict per series: flat, "
        "bounded or growing (exit 1 when anything grows or a check fails)",
        settings=stack_settings,
    )
    soak.add_argument("--minutes", type=float, default=60.0, help="how long orders flow")
    soak.add_argument("--rate", type=float, default=10.0, help="orders per second")
    soak.add_argument("--fault-every", type=float, default=5.0, help="minutes between faults")
    soak.add_argument("--sample-seconds", type=float, default=15.0, help="seconds between samples")
    soak.add_argument("--seed", type=int, default=1, help="seed of the faults' choice")
    soak.add_argument(
        "--cpu-settle-minutes",
        type=float,
        default=10.0,
        help="minutes a process runs before its CPU is judged (a JVM compiles its hot code "
        "for minutes after it starts; before, it is shown as cpu warming)",
    )
    soak.add_argument("--out", help="write soak.json, soak.md and soak.png into this folder")
    soak.add_argument("--keep-running", action="store_true", help="leave the stack and saga up")
