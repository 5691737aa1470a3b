"""Run the saga on a stack: service databases and connectors, three services, the Spark jobs;
place orders; check the invariants across the three databases."""

from __future__ import annotations

import contextlib
import functools
import os
import random
import signal
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from sqlalchemy import create_engine, func, select, text
from sqlalchemy.engine import Engine

from cdc.config import topic_for
from devstack.processes import alive, free_port, start, stop, tail, wait_until
from devstack.stack import Stack
from saga import orders, payments, rules, shipping
from saga.common import SERVICES, migrations_of
from saga.jobs import ALL as JOBS

ROOT = Path(__file__).resolve().parents[1]
SKUS = {"widget": 10_000, "gadget": 10_000, "gizmo": 25}  # gizmo runs out: stock-outs
PARTITIONS = 4


def percentile(samples: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``samples`` by rank; NaN when there are none."""
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class Placed:
    order_id: str
    customer: str
    amount: int
    retried: bool
    posted_at: float


@dataclass
class Report:
    """What the run produced and which invariants hold."""

    orders: int
    by_status: dict[str, int]
    latencies: list[float]
    duplicates: dict[str, int]
    violations: dict[str, list[str]]
    retried_same_order: int
    retried_total: int

    @property
    def ok(self) -> bool:
        return (
            not any(self.violations.values())
            and not any(self.duplicates.values())
            and self.retried_same_order == self.retried_total
            and sum(self.by_status.get(s, 0) for s in rules.FINAL) == self.orders
        )

    def percentile(self, q: float) -> float:
        return percentile(self.latencies, q)


@dataclass
class Saga:
    """The saga's processes on ``stack`` (already up); everything stopped by PID in `stop`."""

    stack: Stack
    workdir: Path
    echo: Callable[[str], None] = print
    urls: dict[str, str] = field(default_factory=dict)
    database_urls: dict[str, str] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)
    engines: dict[str, Engine] = field(default_factory=dict)

    # -- set-up ----------------------------------------------------------------------------
    def prepare(self, stock: dict[str, int] | None = None) -> None:
        """Each service's database, migrations and connector; topics; stock levels."""
        for service in SERVICES:
            url = self.stack.add_service(service)
            migrations_of(service).upgrade(url)
            self.database_urls[service] = url
            self.engines[service] = create_engine(url, pool_size=4)
        admin = AdminClient({"bootstrap.servers": self.stack.bootstrap_servers()})
        wanted = [topic_for(t) for t in (rules.ORDER, rules.PAYMENT, rules.SHIPMENT)]
        existing = set(admin.list_topics(timeout=10).topics)
        missing = [NewTopic(t, PARTITIONS, 1) for t in wanted if t not in existing]
        for _name, done in admin.create_topics(missing).items() if missing else []:
            try:
                done.result(30)
            except Exception as exc:  # created concurrently by the connector: fine
                if "exist" not in str(exc).lower():
                    raise
        shipping.set_stock(self.engines["shipping"], stock or SKUS)

    def env(self) -> dict[str, str]:
        env = {
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p
            ),
            "SAGA_KAFKA_BOOTSTRAP_SERVERS": self.stack.bootstrap_servers(),
            "SAGA_EXACTLY_ONCE_SOURCE": str(self.stack.settings.connect_exactly_once).lower(),
        }
        for service, url in self.database_urls.items():
            env[f"{service.upper()}_DATABASE_URL"] = url
            env[f"{service.upper()}_KAFKA_BOOTSTRAP_SERVERS"] = self.stack.bootstrap_servers()
        return env

    def start_services(self) -> None:
        for service in SERVICES:
            port = free_port()
            log = self.workdir / f"{service}.log"
            pid = start(
                service,
                [sys.executable, "-m", "saga.serve", service, "--port", str(port)],
                log=log,
                env=self.env(),
                cwd=ROOT,
            )
            self.pids[service] = pid
            self.urls[service] = f"http://127.0.0.1:{port}"
        for service in SERVICES:
            wait_until(
                f"{service} service",
                functools.partial(self._ready, service),
                timeout=60,
                pid=self.pids[service],
                log=self.workdir / f"{service}.log",
            )
            self.echo(f"{service:9} {self.urls[service]} ready (pid {self.pids[service]})")

    def _ready(self, service: str) -> bool:
        try:
            return httpx.get(f"{self.urls[service]}/ready", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def start_consumers(self, trigger: float = 0.5) -> int:
        """The three Spark jobs in one driver process (its own process group)."""
        log = self.workdir / "consumers.log"
        pid = start(
            "consumers",
            [
                sys.executable,
                "-m",
                "outboxkit.cli",
                "consume",
                *JOBS,
                "--trigger",
                str(trigger),
                "--checkpoint",
                str(self.workdir / "checkpoints"),
            ],
            log=log,
            env=self.env(),
            cwd=ROOT,
        )
        self.pids["consumers"] = pid
        self.echo(f"consumers saga_payments, saga_shipping, saga_orders (pid {pid})")
        return pid

    def kill_consumers(self) -> None:
        """kill -9 of the driver and everything it started (JVM, Python workers)."""
        pid = self.pids.pop("consumers")
        os.killpg(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)

    def stop(self) -> None:
        for name, pid in list(self.pids.items()):
            if stop(pid, timeout=30):
                self.echo(f"{name:9} stopped (pid {pid})")
            if name == "consumers":
                with contextlib.suppress(ProcessLookupError):  # the JVM is in its group
                    os.killpg(pid, signal.SIGKILL)
        self.pids.clear()
        for engine in self.engines.values():
            engine.dispose()

    # -- load ------------------------------------------------------------------------------
    def place_orders(
        self,
        count: int,
        *,
        seed: int = 7,
        concurrency: int = 8,
        retry_share: float = 0.1,
        rate: float | None = None,
    ) -> list[Placed]:
        """POST ``count`` orders: a mix of standard and vip customers, amounts around the credit
        limits, some gizmos (scarce); a share retried with the same Idempotency-Key. With
        ``rate``, order n is posted at n / rate seconds after the start (an open-loop load)."""
        rng = random.Random(seed)
        plans = []
        for n in range(count):
            customer = f"vip-{n % 17}" if rng.random() < 0.3 else f"cust-{n % 53}"
            items = [{"sku": rng.choice(["widget", "gadget"]), "qty": rng.randint(1, 3)}]
            if rng.random() < 0.3:
                items.append({"sku": "gizmo", "qty": 1})
            amount = rng.randint(20, 700)
            plans.append(
                (
                    {"customer": customer, "items": items, "amount": amount},
                    str(uuid.uuid4()),
                    rng.random() < retry_share,
                )
            )
        client = httpx.Client(base_url=self.urls["orders"], timeout=30)

        began = time.monotonic()

        def post(n: int, plan: tuple[dict[str, Any], str, bool]) -> Placed:
            body, key, retry = plan
            if rate:
                time.sleep(max(0.0, began + n / rate - time.monotonic()))
            posted = time.time()
            first = client.post("/orders", json=body, headers={"Idempotency-Key": key})
            first.raise_for_status()
            order_id = first.json()["id"]
            if retry:  # the client lost the answer and tries again with the same key
                again = client.post("/orders", json=body, headers={"Idempotency-Key": key})
                again.raise_for_status()
                if again.json()["id"] != order_id:
                    order_id = f"MISMATCH:{order_id}:{again.json()['id']}"
            return Placed(order_id, body["customer"], body["amount"], retry, posted)

        with ThreadPoolExecutor(concurrency) as pool:
            placed = list(pool.map(post, range(count), plans))
        client.close()
        return placed

    def warm_up(self, timeout: float = 300) -> Placed:
        """One order through the whole saga, so latencies measured next exclude cold starts
        (JVM, Spark session, Python workers, first connector polls)."""
        placed = self.place_orders(1, seed=0, retry_share=0.0)[0]
        if self.wait_final([placed], timeout=timeout):
            raise RuntimeError(f"the warm-up order did not finish:\n{self.logs_tail()}")
        return placed

    def not_final(self, placed: list[Placed]) -> list[str]:
        """Ids of ``placed`` orders not yet in a final state (one query on the orders database)."""
        ids = [p.order_id for p in placed if not p.order_id.startswith("MISMATCH")]
        with self.engines["orders"].connect() as conn:
            final = set(
                conn.execute(
                    select(orders.orders.c.id).where(
                        orders.orders.c.id.in_(ids), orders.orders.c.status.in_(rules.FINAL)
                    )
                ).scalars()
            )
        return [i for i in ids if i not in final]

    def wait_final(
        self,
        placed: list[Placed],
        *,
        timeout: float = 600,
        progress: Callable[[int], None] | None = None,
    ) -> list[str]:
        """Wait until every one of ``placed`` is in a final state; ``progress`` gets how many
        are. Returns the ids still not final when ``timeout`` ran out (empty: all final)."""
        deadline = time.monotonic() + timeout
        while True:
            pending = self.not_final(placed)
            if progress:
                progress(len(placed) - len(pending))
            if not pending or time.monotonic() >= deadline:
                return pending
            time.sleep(0.5)

    # -- checks ----------------------------------------------------------------------------
    def report(self, placed: list[Placed], *, warm: list[Placed] | None = None) -> Report:
        """Invariants across the three databases, duplicates, and POST -> final latencies
        (``warm`` orders are checked like the others but left out of the latencies)."""
        measured = placed
        placed = [*(warm or []), *placed]
        ids = [p.order_id for p in placed if not p.order_id.startswith("MISMATCH")]
        with self.engines["orders"].connect() as conn:
            rows = conn.execute(
                select(orders.orders.c.id, orders.orders.c.status, orders.orders.c.final_at)
            ).all()
            # Orders created since the first of these POSTs (a retry creating a second order
            # would show here; earlier runs on the same database do not).
            since = datetime.fromtimestamp(min(p.posted_at for p in placed), UTC)
            order_rows = conn.execute(
                select(func.count()).where(orders.orders.c.created_at >= since)
            ).scalar_one()
            timeline_dups = conn.execute(
                text(
                    "SELECT count(*) FROM (SELECT order_id, event_type FROM order_timeline "
                    "GROUP BY 1, 2 HAVING count(*) > 1) d"
                )
            ).scalar_one()
        with self.engines["payments"].connect() as conn:
            pay = {r.order_id: r.status for r in conn.execute(select(payments.payments))}
            log = Counter(
                (r.order_id, r.action)
                for r in conn.execute(
                    select(payments.payment_log.c.order_id, payments.payment_log.c.action)
                )
            )
        with self.engines["shipping"].connect() as conn:
            ship = {r.order_id: r.status for r in conn.execute(select(shipping.shipments))}
            negative = conn.execute(text("SELECT count(*) FROM stock WHERE available < 0"))
            negative_stock = int(negative.scalar_one())
        status = {r.id: r.status for r in rows}
        final_at = {r.id: r.final_at for r in rows}
        violations: dict[str, list[str]] = {
            "order not final": [i for i in ids if status.get(i) not in rules.FINAL],
            "SHIPPED without capture and schedule": [
                i
                for i in ids
                if status.get(i) == rules.SHIPPED
                and (pay.get(i) != payments.CAPTURED or ship.get(i) != shipping.SCHEDULED)
            ],
            "CANCELLED after capture without refund": [
                i
                for i in ids
                if status.get(i) == rules.CANCELLED
                and log[(i, "captured")]
                and pay.get(i) != payments.REFUNDED
            ],
            "shipment without capture": [i for i in ship if log[(i, "captured")] == 0],
            "refund without failed shipment": [
                i
                for i, s in pay.items()
                if s == payments.REFUNDED and ship.get(i) != shipping.FAILED
            ],
        }
        duplicates = {
            "orders beyond one per POST": int(order_rows) - len(placed),
            "captures beyond one per order": sum(
                n - 1 for (_, action), n in log.items() if n > 1 and action == "captured"
            ),
            "payment actions repeated": sum(n - 1 for n in log.values() if n > 1),
            "timeline events repeated": int(timeline_dups),
            "stock below zero": negative_stock,
        }
        latencies = [
            final_at[p.order_id].timestamp() - p.posted_at
            for p in measured
            if final_at.get(p.order_id) is not None
        ]
        retried = [p for p in placed if p.retried]
        return Report(
            orders=len(placed),
            by_status=dict(Counter(status.get(i, "MISSING") for i in ids)),
            latencies=latencies,
            duplicates=duplicates,
            violations=violations,
            retried_same_order=sum(1 for p in retried if not p.order_id.startswith("MISMATCH")),
            retried_total=len(retried),
        )

    def timeline(self, order_id: str) -> dict[str, Any]:
        view: dict[str, Any] = httpx.get(
            f"{self.urls['orders']}/orders/{order_id}", timeout=10
        ).json()
        return view

    def logs_tail(self) -> str:
        return "\n".join(
            f"--- {name}\n{tail(self.workdir / f'{name}.log')}" for name in (*SERVICES, "consumers")
        )
