"""`outboxkit dev demo`: the main job, the order saga on the local stack."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from outboxkit.parsers import SubParsers, command
from outboxkit_workshop.commands import stack_settings

if TYPE_CHECKING:
    from outboxkit_workshop.devstack.settings import StackSettings


def _demo(args: argparse.Namespace, settings: StackSettings) -> int:
    from outboxkit_workshop.demo import run_demo

    return run_demo(
        settings, orders=args.orders, keep_running=args.keep_running, with_console=args.console
    )


def add_parser(sub: SubParsers) -> None:
    demo = command(
        sub,
        "demo",
        _demo,
        help="the main job: the order saga on the local stack",
        settings=stack_settings,
    )
    demo.add_argument("--orders", type=int, default=300, help="how many orders to place")
    demo.add_argument("--keep-running", action="store_true", help="leave the stack and services up")
    demo.add_argument(
        "--console",
        action="store_true",
        help="serve the operator console beside the saga (its address, user and password file "
        "are printed), up until you press Enter",
    )
