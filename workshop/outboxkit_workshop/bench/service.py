"""Service benchmark: the orders service alone (no consumers running), as the saga starts it.

For each client count (1, 8, 32 by default; ``reps`` rounds, interleaved), ``orders`` POSTs
(each with an Idempotency-Key, as the saga's load sends them) in a closed loop: POSTs per
second, and the CPU the service process spent per POST (user + system, from /proc), the
figure that bounds how many orders one service process takes. With py-spy installed, a flame
graph of the service under 8 clients is written next to the figures (``service-flame.svg``).

Every run checks what it measured: each POST got a 201 and an order row exists for each.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from outboxkit_workshop.bench.flame import recording
from outboxkit_workshop.bench.report import (
    Progress,
    describe,
    machine,
    markdown_table,
    spread_cells,
)
from outboxkit_workshop.bench.usage import own_ticks
from outboxkit_workshop.devstack.stack import Stack
from outboxkit_workshop.saga.orders import orders as orders_table
from outboxkit_workshop.saga_harness.processes import Saga

CLIENTS = (1, 8, 32)
FLAME_CLIENTS = 8


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (its threads and any children) so far."""
    return own_ticks(pid) / os.sysconf("SC_CLK_TCK")


def measure(saga: Saga, count: int, clients: int, seed: int) -> dict[str, float]:
    """POST ``count`` orders from ``clients`` clients; POSTs/s and service CPU ms per POST."""
    pid = saga.pids["orders"]
    cpu, began = process_cpu_seconds(pid), time.monotonic()
    placed = saga.place_orders(count, seed=seed, concurrency=clients, retry_share=0.0)
    seconds = time.monotonic() - began
    used = process_cpu_seconds(pid) - cpu
    if len(placed) != count:
        raise RuntimeError(f"{len(placed)} of {count} orders placed")
    return {"posts_per_second": count / seconds, "cpu_ms_per_post": 1000 * used / count}


def flame_graph(saga: Saga, out: Path, count: int) -> Path | None:
    """A py-spy flame graph of the orders service under FLAME_CLIENTS clients, if py-spy is
    installed (`pip install py-spy`; it reads the process's memory: root, or ptrace allowed)."""
    svg = out / "service-flame.svg"
    with recording(saga.pids["orders"], svg) as graph:
        if graph is None:
            return None
        saga.place_orders(count, seed=999, concurrency=FLAME_CLIENTS, retry_share=0.0)
    return svg if svg.exists() else None


def _order_rows(saga: Saga) -> int:
    with saga.engines["orders"].connect() as conn:
        return int(conn.execute(select(func.count()).select_from(orders_table)).scalar_one())


def run(
    stack: Stack, out: Path, *, reps: int = 3, orders: int = 600, clients: tuple[int, ...] = CLIENTS
) -> tuple[dict[str, Any], str]:
    """Each client count ``reps`` times, interleaved; then the flame graph."""
    rounds: dict[int, list[dict[str, float]]] = {c: [] for c in clients}
    with tempfile.TemporaryDirectory(prefix="outboxkit-bench-service-") as workdir:
        saga = Saga(stack, Path(workdir), echo=lambda line: None)
        with Progress("service", reps * len(clients) + 2) as progress:
            try:
                progress.update("service: databases, the orders service")
                saga.prepare()
                saga.start_services(["orders"])
                already = _order_rows(saga)  # a stack used before keeps its orders
                saga.place_orders(50, seed=1, concurrency=4, retry_share=0.0)  # warm
                progress.advance(1)
                for rep in range(reps):
                    for n, c in enumerate(clients):
                        progress.update(f"service: {orders} POSTs, {c} clients ({rep + 1}/{reps})")
                        rounds[c].append(measure(saga, orders, c, seed=10 * rep + n + 2))
                        progress.advance(1)
                progress.update("service: flame graph")
                flame = flame_graph(saga, out, orders)
                progress.advance(1)
                expected = 50 + reps * len(clients) * orders + (orders if flame else 0)
                rows = _order_rows(saga) - already
                if rows != expected:
                    raise RuntimeError(f"{rows} order rows for {expected} orders placed")
            finally:
                saga.stop()
    return _report(stack, rounds, reps, orders, flame)


def _report(
    stack: Stack,
    rounds: dict[int, list[dict[str, float]]],
    reps: int,
    orders: int,
    flame: Path | None,
) -> tuple[dict[str, Any], str]:
    found = machine(stack.database_url())
    rows = [
        [
            c,
            *spread_cells([r["posts_per_second"] for r in runs]),
            *spread_cells([r["cpu_ms_per_post"] for r in runs], ".2f"),
        ]
        for c, runs in rounds.items()
    ]
    markdown = (
        "### The orders service alone: POSTs per second and CPU per POST\n\n"
        f"{describe(found)}\n\n"
        f"{orders} POST /orders per round (Idempotency-Key on each), {reps} rounds per client "
        "count, interleaved; CPU = the service process's user + system time per POST.\n\n"
        + markdown_table(
            [
                "clients",
                "POST/s min",
                "median",
                "max",
                "CPU ms/POST min",
                "median",
                "max",
            ],
            rows,
        )
        + (f"\nFlame graph (py-spy, {FLAME_CLIENTS} clients): `{flame.name}`\n" if flame else "")
    )
    data = {
        "machine": found,
        "orders_per_round": orders,
        "reps": reps,
        "rounds": {str(c): runs for c, runs in rounds.items()},
        "plots": [str(flame)] if flame else [],
    }
    return data, markdown
