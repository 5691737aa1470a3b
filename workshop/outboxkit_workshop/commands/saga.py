"""`outboxkit dev saga ACTION [NAME...]`: the saga example's processes as an operator runs them
on the local stack (prepare, up, status, start, stop, restart, kill -9), each recorded with PID,
port and log."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from outboxkit.parsers import SubParsers, command, group
from outboxkit_workshop.commands import stack_settings

if TYPE_CHECKING:
    from outboxkit_workshop.devstack.settings import StackSettings


def progress(line: str) -> None:
    """A progress line on stderr, so that stdout holds only the command's report."""
    print(line, file=sys.stderr, flush=True)


def recorded_saga(stack: Any) -> Any:
    """The saga whose processes are recorded in the stack's directory, if any."""
    from outboxkit_workshop.saga_harness.processes import Saga

    workdir = stack.dir / "saga"
    if not (workdir / "processes.json").exists() or not stack.state_file.exists():
        return None
    return Saga.attach(stack, workdir, echo=stack.echo)


def service_replicas(stack: Any) -> int:
    """The stack's replica count per saga service (setting service_replicas)."""
    return int(stack.settings.service_replicas)


def saga_command(args: argparse.Namespace, settings: StackSettings) -> int:
    """`outboxkit dev saga ACTION [NAME...]`: prepare, up, status, start, stop, restart or kill -9;
    a NAME is a process: a service replica (orders, orders-2, ...) or the consumer driver."""
    from outboxkit_workshop.devstack.stack import Stack
    from outboxkit_workshop.saga_harness.processes import Saga, service_of

    _check_kill_target(args)
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
            raise LookupError(f"no saga recorded in {stack.dir / 'saga'}: outboxkit dev saga up")
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


def _check_kill_target(args: argparse.Namespace) -> None:
    """kill -9 names its processes, or says --all: never every process by default."""
    from outboxkit.commands.errors import CommandError

    if args.action != "kill":
        return
    if bool(args.names) == args.all:
        raise CommandError(
            "saga kill needs its target: the processes' names (orders, orders-2, consumers, ...) "
            "or --all, not both"
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


ACTIONS = {
    "prepare": "roles, databases, migrations, connectors, topics only (a deployment's set-up job)",
    "up": "the stack up, the saga prepared once, then its processes started",
    "status": "each process: PID, port, health, URL, log; exits 1 when one is not healthy",
    "start": "start the named processes",
    "stop": "stop the named processes",
    "restart": "stop and start the named processes again, each on its port",
    "kill": "kill -9 the named processes, or every one with --all (faults by hand)",
}


def add_parser(sub: SubParsers) -> None:
    actions = group(
        sub,
        "saga",
        help="the example saga's services and consumer driver: prepare (set-up only), up, "
        "status, start, stop, restart, kill",
    )
    for name, text in ACTIONS.items():
        parser = command(actions, name, saga_command, help=text, settings=stack_settings)
        if name in ("prepare", "status"):
            parser.set_defaults(names=[])
        else:
            parser.add_argument(
                "names",
                nargs="*",
                metavar="NAME",
                help="processes: orders, payments, shipping (replica 1 of each), orders-2 ... "
                "(other replicas: setting service_replicas), consumers "
                + ("(required, or --all)" if name == "kill" else "(default: all)"),
            )
        if name == "kill":
            parser.add_argument(
                "--all", action="store_true", help="kill -9 every process (instead of names)"
            )
        if name != "prepare":
            parser.add_argument("--json", action="store_true", help="print the processes as JSON")
