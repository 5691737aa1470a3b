"""The saga's invariants across the three services' databases: every order final, effects
consistent with the final state, no effect applied twice; and POST -> final latencies."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import func, select, text
from sqlalchemy.engine import Engine

from outboxkit.saga import orders, payments, rules, shipping
from outboxkit.saga_harness.load import Placed


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


def check(
    engines: Mapping[str, Engine], placed: list[Placed], *, warm: list[Placed] | None = None
) -> Report:
    """Invariants across the three databases (``engines`` by service), duplicates, and
    POST -> final latencies (``warm`` orders are checked like the others but left out of the
    latencies). Orders whose retried POST created another order are counted as failed retries
    and not checked further."""
    measured = [p for p in placed if p.retry_mapped]
    placed = [*(warm or []), *placed]
    ids = [p.order_id for p in placed if p.retry_mapped]
    with engines["orders"].connect() as conn:
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
    with engines["payments"].connect() as conn:
        pay = {r.order_id: r.status for r in conn.execute(select(payments.payments))}
        log = Counter(
            (r.order_id, r.action)
            for r in conn.execute(
                select(payments.payment_log.c.order_id, payments.payment_log.c.action)
            )
        )
    with engines["shipping"].connect() as conn:
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
            i for i, s in pay.items() if s == payments.REFUNDED and ship.get(i) != shipping.FAILED
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
        retried_same_order=sum(1 for p in retried if p.retry_mapped),
        retried_total=len(retried),
    )
