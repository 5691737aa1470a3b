"""`outboxkit dev stack install|up|down|status`: the local dev stack (the `dev` group's
commands are the only ones that build it)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from outboxkit.parsers import SubParsers, command, group
from outboxkit_workshop.commands import stack_settings

if TYPE_CHECKING:
    from outboxkit_workshop.devstack.settings import StackSettings


def _install(args: argparse.Namespace, settings: StackSettings) -> int:
    from outboxkit_workshop.devstack import artifacts

    found = artifacts.locate(settings.cache_dir, install=True)
    v = found.versions
    print(
        f"stack install: Apache Kafka {v.kafka}, Debezium {v.debezium}, Spark Kafka connector "
        f"{v.spark} in {found.broker_libs.parent}"
    )
    return 0


def _up(args: argparse.Namespace, settings: StackSettings) -> int:
    from outboxkit_workshop.devstack.stack import Stack

    stack = Stack(settings)
    stack.up()
    _print_status(stack.status(), as_json=False)
    return 0


def _down(args: argparse.Namespace, settings: StackSettings) -> int:
    from outboxkit_workshop.commands.saga import recorded_saga
    from outboxkit_workshop.devstack.stack import Stack

    stack = Stack(settings)
    saga = recorded_saga(stack)
    if saga is not None:  # the saga's processes first: they use the stack
        saga.stop()
    stack.down(keep_data=args.keep_data)
    if not args.keep_data:
        from outboxkit_workshop.saga_harness.processes import drop_checkpoints

        drop_checkpoints(stack.dir / "saga")
    return 0


def _status(args: argparse.Namespace, settings: StackSettings) -> int:
    """The stack's components, connectors and the saga's processes; exit 1 unless all healthy."""
    from outboxkit_workshop.commands.saga import recorded_saga
    from outboxkit_workshop.devstack.stack import Stack

    stack = Stack(settings)
    saga = recorded_saga(stack)
    report = stack.status()
    processes = saga.status() if saga is not None and report["up"] else []
    if processes:
        report["processes"] = processes
    _print_status(report, as_json=args.json)
    healthy = all(p["health"] in ("ready", "running") for p in processes)
    return 0 if report["up"] and not report.get("failures") and healthy else 1


def _print_status(report: dict[str, object], *, as_json: bool) -> None:
    if as_json:
        print(json.dumps(report, indent=2, default=str))
        return
    from rich.console import Console
    from rich.table import Table

    from cdc.health import describe

    if "postgres" not in report:
        print(f"stack: not up ({report['stack_dir']})")
        return
    table = Table(title=f"outboxkit dev stack ({report['stack_dir']})")
    for column in ("component", "mode", "running", "pid", "endpoint"):
        table.add_column(column)
    for name in ("postgres", "broker", "connect", "spark"):
        comp = report.get(name)
        if not isinstance(comp, dict):
            continue
        running = {True: "yes", False: "NO", None: comp["mode"]}[comp["running"]]
        table.add_row(name, comp["mode"], running, str(comp["pid"] or ""), comp["endpoint"])
    Console().print(table)
    nodes = report.get("nodes") or []
    assert isinstance(nodes, list)
    if nodes:
        by_node = Table(title="nodes")
        for column in ("engine", "node", "role", "pid", "endpoint", "health"):
            by_node.add_column(column)
        for node in nodes:
            by_node.add_row(
                node["engine"],
                node["name"],
                node["role"],
                str(node["pid"] or ""),
                node["endpoint"],
                node["health"],
            )
        Console().print(by_node)
    print(f"connectors: {report['connectors']}")
    print(f"slots:      {report['slots']}")
    failures = report.get("failures") or {}
    assert isinstance(failures, dict)
    for name, failure in failures.items():
        print("\n".join(describe(name, failure)))
    processes = report.get("processes")
    if isinstance(processes, list):
        from outboxkit_workshop.commands.saga import print_processes

        print_processes(processes)


def add_parser(sub: SubParsers) -> None:
    actions = group(sub, "stack", help="the local stack: Postgres, broker, Connect + Debezium")
    command(
        actions,
        "install",
        _install,
        help="fetch the jars and distributions the stack runs",
        settings=stack_settings,
    )
    command(
        actions, "up", _up, help="start the stack (or what of it is down)", settings=stack_settings
    )
    down = command(
        actions,
        "down",
        _down,
        help="stop the stack (the saga's processes first)",
        settings=stack_settings,
    )
    down.add_argument("--keep-data", action="store_true", help="keep the Postgres data")
    status = command(
        actions,
        "status",
        _status,
        help="the stack's endpoints and health, and the saga's processes; exits 1 when one is "
        "not healthy",
        settings=stack_settings,
    )
    status.add_argument("--json", action="store_true", help="print the report as JSON")
