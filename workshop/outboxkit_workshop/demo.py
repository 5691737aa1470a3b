"""The main job: the order -> pay -> ship saga on the embedded stack, end to end."""

from __future__ import annotations

import contextlib
import json
import os
import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
from rich.table import Table

from outboxkit.kernel import tracing
from outboxkit_workshop.bench.report import percentile
from outboxkit_workshop.demo_console import demo_console, wait_for_person
from outboxkit_workshop.devstack.settings import StackSettings
from outboxkit_workshop.devstack.stack import Stack

# Orders wait 30 s for their payment, then are cancelled; 5% of them come from customers whose
# card gateway answers after 35 s: their capture, late, is refunded.
DEMO_TIMING: dict[str, Any] = {
    "payment_timeout": 30.0,
    "shipping_timeout": 60.0,
    "slow_gateway": 35.0,
    "slow_share": 0.05,
}


def run_demo(
    settings: StackSettings,
    *,
    orders: int = 300,
    keep_running: bool = False,
    seed: int = 7,
    with_console: bool = False,
) -> int:
    """Start everything, place ``orders`` orders, wait until each is final, report, stop;
    ``with_console``: the operator console beside it, until the person at the terminal is
    done."""
    from outboxkit_workshop.saga_harness.processes import Saga, drop_checkpoints

    console = Console()
    stack = Stack(settings, echo=lambda line: console.print(f"[dim]{line}[/dim]"))
    console.rule("outboxkit dev demo: order -> pay -> ship, exactly once")
    replicas = int(getattr(stack.settings, "service_replicas", 1))
    saga = Saga(
        stack,
        stack.dir / "saga",
        echo=lambda line: console.print(f"[dim]{line}[/dim]"),
        replicas=replicas,
        **DEMO_TIMING,
    )
    started = time.monotonic()
    opened = contextlib.ExitStack()
    try:
        with console.status("starting Postgres, broker, Kafka Connect + Debezium..."):
            stack.up()
        with console.status("service databases, migrations, connectors, topics..."):
            saga.prepare()
        each = f" ({replicas} replicas of each)" if replicas > 1 else ""
        with console.status(f"starting the orders, payments and shipping services{each}..."):
            saga.start_services()
        saga.start_consumers()
        if with_console:
            _open_console(console, opened, saga)
        with console.status("warming up: one order through Spark start-up and every hop..."):
            warm = saga.warm_up()
        over = f", round-robin over {replicas} orders replicas" if replicas > 1 else ""
        console.print(
            f"placing {orders} orders (30% vip customers, amounts around the credit limits, "
            f"scarce gizmos, 10% retried with the same Idempotency-Key{over}; "
            f"{DEMO_TIMING['slow_share']:.0%} from customers whose card gateway answers after "
            f"{DEMO_TIMING['slow_gateway']:g} s, past the {DEMO_TIMING['payment_timeout']:g} s "
            "payment timeout)"
        )
        placed = saga.place_orders(orders, seed=seed)
        with Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        ) as progress:
            task = progress.add_task("orders in a final state", total=len(placed))
            saga.wait_final(
                placed, timeout=900, progress=lambda n: progress.update(task, completed=n)
            )
        report = saga.report(placed, warm=[warm])
        _print_report(console, report)
        sample = _interesting(saga, report, placed)
        if sample:
            _print_timeline(console, saga.timeline(sample))
            _print_trace(console, next((p.trace_id for p in placed if p.order_id == sample), None))
        console.print(f"demo took {time.monotonic() - started:.0f}s")
        if keep_running:
            console.print("left running:")
            for name, url in saga.urls.items():
                pages = ("/metrics",) if name == "consumers" else ("/docs", "/metrics")
                console.print(f"  {name:10} " + "  ".join(f"{url}{page}" for page in pages))
            console.print(f"  stack: {json.dumps(stack.status(), default=str)[:300]}...")
            console.print(
                "see them with: .venv/bin/outboxkit dev saga status (restart one: dev saga "
                "restart NAME); stop everything with: .venv/bin/outboxkit dev stack down"
            )
        elif not report.ok:
            console.print(saga.logs_tail(), markup=False)
        if with_console:
            wait_for_person("the console stays up: press Enter to stop it and the demo ")
        return 0 if report.ok else 1
    finally:
        opened.close()
        if not keep_running:
            with console.status("stopping services, Spark and the stack..."):
                saga.stop()
                stack.down()
                drop_checkpoints(saga.workdir)


def _open_console(console: Console, opened: contextlib.ExitStack, saga: Any) -> None:
    """`outboxkit console` on the saga's jobs, for the rest of the demo; how to sign in."""
    from outboxkit_workshop.saga_harness.processes import ROOT

    with console.status("starting the operator console..."):
        served = opened.enter_context(demo_console(saga.workdir, saga.env(), ROOT))
    console.print(
        f"operator console: [bold]{served.url}[/] (user {served.user}, password in "
        f"{served.password_file}; its log: {served.log})"
    )


def _print_trace(console: Console, trace_id: str | None) -> None:
    """The trace id of the order shown (its POST's, which its events carry on), and where its
    spans went."""
    if trace_id is None:
        return
    console.print(
        f"trace id of this order: [bold]{trace_id}[/] "
        "(the trace_id of its POST in the orders service's log)"
    )
    if tracing.exporters_wanted(os.environ):
        endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "the configured exporter")
        console.print(f"  its spans went to {endpoint}: search the trace id there (e.g. Jaeger)")
    else:
        console.print(
            "  no spans recorded: set OTEL_EXPORTER_OTLP_ENDPOINT (e.g. http://localhost:4318) "
            "to send the services' and consumers' spans to a collector or Jaeger"
        )


def _print_report(console: Console, report: Any) -> None:
    table = Table(title=f"{report.orders} orders, the warm-up order included")
    table.add_column("final state")
    table.add_column("orders", justify="right")
    for status, count in sorted(report.by_status.items()):
        table.add_row(status, str(count))
    console.print(table)
    console.print(
        f"POST -> final state: p50 {percentile(report.latencies, 0.5):.2f}s, "
        f"p95 {percentile(report.latencies, 0.95):.2f}s, "
        f"p99 {percentile(report.latencies, 0.99):.2f}s"
    )
    checks = Table(title="invariants across the three databases")
    checks.add_column("check")
    checks.add_column("result", justify="right")
    for name, count in report.duplicates.items():
        checks.add_row(f"duplicates: {name}", _mark(count == 0, str(count)))
    for name, ids in report.violations.items():
        checks.add_row(name, _mark(not ids, str(len(ids))))
    checks.add_row(
        "retried POSTs answered with the first order",
        _mark(
            report.retried_same_order == report.retried_total,
            f"{report.retried_same_order}/{report.retried_total}",
        ),
    )
    console.print(checks)
    if report.late:
        late = report.late
        console.print(
            f"timeouts: {late['timed out']} orders cancelled by their timer; "
            f"{late['captured late']} of them captured late, "
            f"{late['captured late, refunded']} of those refunded"
        )
    console.print("[bold green]all invariants hold[/]" if report.ok else "[bold red]FAILED[/]")


def _mark(ok: bool, text: str) -> str:
    return f"[green]{text}[/]" if ok else f"[red]{text}[/]"


def _interesting(saga: Any, report: Any, placed: list[Any]) -> str | None:
    """An order whose payment came after its timer cancelled it, if there is one (the whole
    story: timer, late capture, refund), else one that went through compensation, else the
    first one."""
    from sqlalchemy import text

    with saga.engines["payments"].connect() as conn:
        refunded = list(
            conn.execute(text("SELECT order_id FROM payments WHERE status = 'REFUNDED'")).scalars()
        )
    if refunded:
        with saga.engines["orders"].connect() as conn:
            late = conn.execute(
                text(
                    "SELECT order_id FROM order_timeline WHERE order_id = ANY(:ids) "
                    "AND event_type = 'PaymentTimedOut' LIMIT 1"
                ),
                {"ids": refunded},
            ).scalar()
        return str(late or refunded[0])
    return placed[0].order_id if placed else None


def _print_timeline(console: Console, view: dict[str, Any]) -> None:
    table = Table(
        title=f"timeline of order {view['id']} ({view['customer']}, amount {view['amount']}, "
        f"{view['status']})"
    )
    for column in ("at", "event", "from", "order status after", "detail"):
        table.add_column(column)
    for entry in view["timeline"]:
        detail = (entry.get("detail") or {}).get("reason") or ""
        table.add_row(
            str(entry["at"])[11:23],
            entry["event_type"],
            entry["service"],
            entry["status_after"],
            str(detail),
        )
    console.print(table)
