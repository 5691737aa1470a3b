"""`outboxkit stack install|up|down|status`: the local dev stack (the only command group,
with demo, saga, chaos and bench, that builds it)."""

from __future__ import annotations

import argparse
import json

from outboxkit.devstack.settings import StackSettings


def _stack(args: argparse.Namespace, settings: StackSettings) -> int:
    from outboxkit.devstack import artifacts
    from outboxkit.devstack.stack import Stack

    if args.action == "install":
        found = artifacts.locate(settings.cache_dir, install=True)
        v = found.versions
        print(
            f"stack install: Apache Kafka {v.kafka}, Debezium {v.debezium}, Spark Kafka connector "
            f"{v.spark} in {found.broker_libs.parent}"
        )
        return 0
    stack = Stack(settings)
    if args.action == "up":
        stack.up()
        _print_status(stack.status(), as_json=False)
        return 0
    from outboxkit.commands.saga import recorded_saga

    saga = recorded_saga(stack)
    if args.action == "down":
        if saga is not None:  # the saga's processes first: they use the stack
            saga.stop()
        stack.down(keep_data=args.keep_data)
        if not args.keep_data:
            from outboxkit.saga_harness.processes import drop_checkpoints

            drop_checkpoints(stack.dir / "saga")
        return 0
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
    table = Table(title=f"outboxkit stack ({report['stack_dir']})")
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
        from outboxkit.commands.saga import print_processes

        print_processes(processes)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    stack = sub.add_parser("stack", help="the local stack: Postgres, broker, Connect + Debezium")
    stack.add_argument(
        "action",
        choices=["install", "up", "down", "status"],
        help="install: fetch the jars and distributions; up: start the stack; down: stop it "
        "(the saga's processes first); status: its endpoints and health",
    )
    stack.add_argument("--json", action="store_true", help="status as JSON")
    stack.add_argument("--keep-data", action="store_true", help="down: keep the Postgres data")
    stack.set_defaults(run=_stack, settings=StackSettings)
