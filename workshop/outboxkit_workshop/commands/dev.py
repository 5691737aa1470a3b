"""`outboxkit dev stack|demo|saga|chaos|soak|bench|kubernetes`: what runs the local dev stack and
the example saga (and renders its Kubernetes manifests), apart from the operator's commands
(these read the dev stack's settings, StackSettings)."""

from __future__ import annotations

from outboxkit.parsers import HelpFormatter, SubParsers


def add_parser(sub: SubParsers) -> None:
    from outboxkit_workshop.bench import cli as bench
    from outboxkit_workshop.commands import chaos, demo, kubernetes, saga, soak, stack

    help = (
        "the local dev stack, the example saga, its fault campaign and soak run, the benchmarks "
        "and the saga's Kubernetes manifests"
    )
    dev = sub.add_parser("dev", help=help, description=help, formatter_class=HelpFormatter)
    commands = dev.add_subparsers(dest="dev_command", metavar="COMMAND", required=True)
    for group in (stack, demo, saga, chaos, soak, bench, kubernetes):
        group.add_parser(commands)
