"""Service benchmark: the orders service alone (no consumers running), as the saga starts it,
its async routes against the same routes written synchronously, side by side in one run.

Two processes of the orders service run on the one orders database: ``orders`` serving its
async routes (an AsyncSession on psycopg's async driver, the saga's default) and ``orders-2``
serving the synchronous ones (a Session; ``ORDERS_HTTP_ROUTES=sync``). For each client count (1,
16, 64 by default; ``reps`` rounds), each variant in turn takes ``orders`` POSTs (each with an
Idempotency-Key, as the saga's load sends them) from a closed loop of that many clients, the
same orders for both (one seed), the variant going first alternating from one measurement to the
next: POSTs per second, and the CPU the service process spent per POST (user + system, from
/proc), the figure that bounds how many orders one service process takes; and the ratio of
async to sync for each. The orders' payment timeout is a day: no timer comes due meanwhile.
With py-spy installed, a flame graph of the async service under 16 clients is written next to
the figures (``service-flame.svg``).

Every run checks what it measured: each POST created an order of its own (a 201 with a new
id), an order row exists for each, and every 503 a client had to retry is counted (none
expected).
"""

from __future__ import annotations

import os
import statistics
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
    ratio,
    spread_cells,
)
from outboxkit_workshop.bench.usage import own_ticks
from outboxkit_workshop.devstack.stack import Stack
from outboxkit_workshop.saga.orders import orders as orders_table
from outboxkit_workshop.saga_harness import load
from outboxkit_workshop.saga_harness.processes import Saga

CLIENTS = (1, 16, 64)
FLAME_CLIENTS = 16
WARM = 50  # orders each process takes before the measurements (pools, caches, code paths)
# Each POST schedules its order's payment timeout; at a day, none comes due during the run, so
# neither process spends the measurements releasing the timers of earlier rounds.
TIMEOUT = 24 * 3600.0
# Each variant's process (a replica name of the saga) and its routes.
VARIANTS = {"async": "orders", "sync": "orders-2"}
Round = dict[str, float]
Rounds = dict[str, dict[int, list[Round]]]  # variant -> clients -> one entry per round


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (its threads and any children) so far."""
    return own_ticks(pid) / os.sysconf("SC_CLK_TCK")


def place(saga: Saga, variant: str, count: int, clients: int, seed: int) -> list[load.Placed]:
    """``count`` orders POSTed to ``variant``'s process by ``clients`` closed-loop clients;
    each must be a new order (201, its own id)."""
    placed = load.place_orders(
        saga.urls[VARIANTS[variant]], count, seed=seed, concurrency=clients, retry_share=0.0
    )
    created = {p.order_id for p in placed}
    if len(placed) != count or len(created) != count:
        raise RuntimeError(f"{variant}: {len(created)} orders created for {count} POSTs")
    return placed


def measure(saga: Saga, variant: str, count: int, clients: int, seed: int) -> Round:
    """POST ``count`` orders from ``clients`` clients to ``variant``'s process: POSTs/s, its
    CPU ms per POST, and the 503s the clients retried."""
    pid = saga.pids[VARIANTS[variant]]
    cpu, began = process_cpu_seconds(pid), time.monotonic()
    placed = place(saga, variant, count, clients, seed)
    seconds = time.monotonic() - began
    used = process_cpu_seconds(pid) - cpu
    return {
        "posts_per_second": count / seconds,
        "cpu_ms_per_post": 1000 * used / count,
        "unavailable": sum(p.unavailable for p in placed),
    }


def flame_graph(saga: Saga, out: Path, count: int) -> tuple[Path | None, int]:
    """A py-spy flame graph of the async orders service under FLAME_CLIENTS clients, if py-spy
    is installed (`pip install py-spy`; it reads the process's memory: root, or ptrace
    allowed); and the orders placed meanwhile (none without py-spy)."""
    svg = out / "service-flame.svg"
    with recording(saga.pids[VARIANTS["async"]], svg) as graph:
        if graph is None:
            return None, 0
        place(saga, "async", count, FLAME_CLIENTS, seed=999)
    return (svg if svg.exists() else None), count


def _check_routes(saga: Saga) -> None:
    """Each variant's process was started with its routes (its environment, from /proc)."""
    for variant, name in VARIANTS.items():
        environ = Path(f"/proc/{saga.pids[name]}/environ").read_bytes().split(b"\0")
        if f"ORDERS_HTTP_ROUTES={variant}".encode() not in environ:
            raise RuntimeError(f"{name} was not started with ORDERS_HTTP_ROUTES={variant}")


def _order_rows(saga: Saga) -> int:
    with saga.engines["orders"].connect() as conn:
        return int(conn.execute(select(func.count()).select_from(orders_table)).scalar_one())


def run(
    stack: Stack, out: Path, *, reps: int = 3, orders: int = 600, clients: tuple[int, ...] = CLIENTS
) -> tuple[dict[str, Any], str]:
    """Each client count ``reps`` times, both variants at each, interleaved; then the flame
    graph."""
    rounds: Rounds = {v: {c: [] for c in clients} for v in VARIANTS}
    routes = {name: {"ORDERS_HTTP_ROUTES": v} for v, name in VARIANTS.items()}
    with tempfile.TemporaryDirectory(prefix="outboxkit-bench-service-") as workdir:
        saga = Saga(
            stack,
            Path(workdir),
            echo=lambda line: None,
            replicas=2,
            environment=routes,
            payment_timeout=TIMEOUT,
        )
        with Progress("service", reps * len(clients) * len(VARIANTS) + 2) as progress:
            try:
                progress.update("service: databases, the orders service (async and sync)")
                saga.prepare()
                saga.start_services(list(VARIANTS.values()))
                _check_routes(saga)
                already = _order_rows(saga)  # a stack used before keeps its orders
                for variant in VARIANTS:
                    place(saga, variant, WARM, 4, seed=1)
                progress.advance(1)
                for rep in range(reps):
                    for n, c in enumerate(clients):
                        turn = list(VARIANTS)
                        if (rep * len(clients) + n) % 2:  # which one goes first, in turn
                            turn.reverse()
                        for variant in turn:
                            progress.update(
                                f"service: {orders} POSTs, {c} clients, {variant} "
                                f"({rep + 1}/{reps})"
                            )
                            seed = 10 * rep + n + 2  # the same orders for both variants
                            rounds[variant][c].append(measure(saga, variant, orders, c, seed))
                            progress.advance(1)
                progress.update("service: flame graph (async)")
                flame, flamed = flame_graph(saga, out, orders)
                progress.advance(1)
                expected = len(VARIANTS) * (WARM + reps * len(clients) * orders) + flamed
                rows = _order_rows(saga) - already
                if rows != expected:
                    raise RuntimeError(f"{rows} order rows for {expected} orders placed")
            finally:
                saga.stop()
    return _report(stack, rounds, reps, orders, flame)


def _median(runs: list[Round], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def _report(
    stack: Stack, rounds: Rounds, reps: int, orders: int, flame: Path | None
) -> tuple[dict[str, Any], str]:
    found = machine(stack.database_url())
    clients = list(next(iter(rounds.values())))
    rows = [
        [
            c,
            variant,
            *spread_cells([r["posts_per_second"] for r in rounds[variant][c]]),
            *spread_cells([r["cpu_ms_per_post"] for r in rounds[variant][c]], ".2f"),
        ]
        for c in clients
        for variant in rounds
    ]
    ratios = {
        c: {
            key: _median(rounds["async"][c], key) / _median(rounds["sync"][c], key)
            for key in ("posts_per_second", "cpu_ms_per_post")
        }
        for c in clients
    }
    unavailable = sum(
        int(r["unavailable"]) for by in rounds.values() for rs in by.values() for r in rs
    )
    markdown = (
        "### The orders service alone, async and sync routes: POSTs per second and CPU per POST"
        f"\n\n{describe(found)}\n\n"
        f"{orders} POST /orders per round (Idempotency-Key on each), {reps} rounds per client "
        "count and variant, interleaved: async = the orders service's async routes "
        "(AsyncSession, psycopg's async driver), sync = the same routes synchronous "
        "(ORDERS_HTTP_ROUTES=sync), each its own process; CPU = the service process's user + "
        "system time per POST.\n\n"
        + markdown_table(
            [
                "clients",
                "routes",
                "POST/s min",
                "median",
                "max",
                "CPU ms/POST min",
                "median",
                "max",
            ],
            rows,
        )
        + "\nAsync / sync, ratio of medians:\n\n"
        + markdown_table(
            ["clients", "POST/s", "CPU per POST"],
            [
                [c, ratio(r["posts_per_second"]), ratio(r["cpu_ms_per_post"])]
                for c, r in ratios.items()
            ],
        )
        + (f"\n{unavailable} POSTs answered 503 and retried.\n" if unavailable else "")
        + (
            f"\nFlame graph (py-spy, async routes, {FLAME_CLIENTS} clients): `{flame.name}`\n"
            if flame
            else ""
        )
    )
    data = {
        "machine": found,
        "orders_per_round": orders,
        "reps": reps,
        "clients": clients,
        "variants": {v: {str(c): runs for c, runs in by.items()} for v, by in rounds.items()},
        "async_over_sync": {str(c): r for c, r in ratios.items()},
        "flame_graph": {"variant": "async", "clients": FLAME_CLIENTS} if flame else None,
        "plots": [str(flame)] if flame else [],
    }
    return data, markdown
