"""The saga's invariants across the three services' databases: every order final, effects
consistent with the final state, no effect applied twice; and POST -> final latencies."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select, text
from sqlalchemy.engine import Engine

from inbox.operations import parked_counts
from outboxkit_workshop.saga import orders, payments, rules, shipping
from outboxkit_workshop.saga_harness.load import Placed


@dataclass(frozen=True)
class Timeouts:
    """The orders' timeouts a run used, and how long past one an order may still wait (the
    timer's release, its hop through Kafka and a micro-batch, and any outage in between)."""

    payment: float
    shipping: float
    bound: float = 30.0


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
    # Orders cancelled by a timer, those of them whose payment was captured anyway (late), and
    # of those the ones refunded (all of them, when the saga holds).
    late: dict[str, int] = field(default_factory=dict)
    # When each order of ``latencies`` was POSTed (epoch seconds), in the same order.
    posted: list[float] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (
            not any(self.violations.values())
            and not any(self.duplicates.values())
            and self.retried_same_order == self.retried_total
            and sum(self.by_status.get(s, 0) for s in rules.FINAL) == self.orders
        )


def check(
    engines: Mapping[str, Engine],
    placed: list[Placed],
    *,
    warm: list[Placed] | None = None,
    timeouts: Timeouts | None = None,
) -> Report:
    """Invariants across the three databases (``engines`` by service), duplicates, and
    POST -> final latencies (``warm`` orders are checked like the others but left out of the
    latencies). Orders whose retried POST created another order are counted as failed retries
    and not checked further. With ``timeouts``: no order waited for its payment, or once paid
    for its shipment, longer than its timeout plus the bound."""
    measured = [p for p in placed if p.retry_mapped]
    placed = [*(warm or []), *placed]
    ids = [p.order_id for p in placed if p.retry_mapped]
    with engines["orders"].connect() as conn:
        rows = conn.execute(
            select(
                orders.orders.c.id,
                orders.orders.c.status,
                orders.orders.c.final_at,
                orders.orders.c.created_at,
            )
        ).all()
        waited = _waits(conn, ids)
        timed_out = _timed_out(conn, ids)
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
        "refund of an order not cancelled": [
            i for i, s in pay.items() if s == payments.REFUNDED and status.get(i) != rules.CANCELLED
        ],
        "shipment scheduled for an order not shipped": [
            i for i, s in ship.items() if s == shipping.SCHEDULED and status.get(i) != rules.SHIPPED
        ],
    }
    if timeouts is not None:
        created = {r.id: r.created_at for r in rows}
        violations["waited past its payment timeout"] = [
            i
            for i in ids
            if i in waited
            and (waited[i][0] - created[i]).total_seconds() > timeouts.payment + timeouts.bound
        ]
        violations["waited past its shipping timeout"] = [
            i
            for i in ids
            if i in waited
            and waited[i][1] is not None
            and final_at.get(i) is not None
            and (final_at[i] - waited[i][1]).total_seconds() > timeouts.shipping + timeouts.bound
        ]
    duplicates = {
        "orders beyond one per POST": int(order_rows) - len(placed),
        "captures beyond one per order": sum(
            n - 1 for (_, action), n in log.items() if n > 1 and action == "captured"
        ),
        "payment actions repeated": sum(n - 1 for n in log.values() if n > 1),
        "timeline events repeated": int(timeline_dups),
        "stock below zero": negative_stock,
    }
    done = [p for p in measured if final_at.get(p.order_id) is not None]
    latencies = [final_at[p.order_id].timestamp() - p.posted_at for p in done]
    retried = [p for p in placed if p.retried]
    captured_late = [i for i in timed_out if log[(i, "captured")]]
    late = {
        "timed out": len(timed_out),
        "captured late": len(captured_late),
        "captured late, refunded": sum(1 for i in captured_late if pay.get(i) == payments.REFUNDED),
    }
    return Report(
        orders=len(placed),
        by_status=dict(Counter(status.get(i, "MISSING") for i in ids)),
        latencies=latencies,
        posted=[p.posted_at for p in done],
        duplicates=duplicates,
        violations=violations,
        retried_same_order=sum(1 for p in retried if p.retry_mapped),
        retried_total=len(retried),
        late=late,
    )


def _waits(conn: Any, ids: list[str]) -> dict[str, tuple[datetime, datetime | None]]:
    """Per order of ``ids`` that left PENDING: when it did, and when it became PAID (None:
    never), from its timeline (the orders database's clock, as the timers')."""
    found = conn.execute(
        text(
            "SELECT order_id, min(at) FILTER (WHERE status_after <> :pending) AS left_pending, "
            "min(at) FILTER (WHERE status_after = :paid) AS paid FROM order_timeline "
            "WHERE order_id = ANY(:ids) GROUP BY order_id"
        ),
        {"pending": rules.PENDING, "paid": rules.PAID, "ids": ids},
    ).all()
    return {r.order_id: (r.left_pending, r.paid) for r in found if r.left_pending is not None}


def _timed_out(conn: Any, ids: list[str]) -> list[str]:
    """The orders of ``ids`` that a timer cancelled (their first CANCELLED entry is a timer's)."""
    found = conn.execute(
        text(
            "SELECT DISTINCT ON (order_id) order_id, event_type FROM order_timeline "
            "WHERE order_id = ANY(:ids) AND status_after = :cancelled ORDER BY order_id, at, id"
        ),
        {"ids": ids, "cancelled": rules.CANCELLED},
    ).all()
    return [r.order_id for r in found if r.event_type in rules.TIMERS]


def unsettled(engines: Mapping[str, Engine], ids: list[str]) -> list[str]:
    """What a final state still waits for: the orders of ``ids`` cancelled while their payment
    is CAPTURED or their shipment SCHEDULED (the refund or the shipment's cancellation is on
    its way), and a note per consumer database holding records waiting for a delayed retry (a
    late reply to come). Empty once every late reply was applied and compensated."""
    with engines["orders"].connect() as conn:
        cancelled = set(
            conn.execute(
                select(orders.orders.c.id).where(
                    orders.orders.c.id.in_(ids), orders.orders.c.status == rules.CANCELLED
                )
            ).scalars()
        )
    waiting: list[str] = []
    with engines["payments"].connect() as conn:
        captured = conn.execute(
            select(payments.payments.c.order_id).where(
                payments.payments.c.status == payments.CAPTURED
            )
        ).scalars()
        waiting += [i for i in captured if i in cancelled]
    with engines["shipping"].connect() as conn:
        scheduled = conn.execute(
            select(shipping.shipments.c.order_id).where(
                shipping.shipments.c.status == shipping.SCHEDULED
            )
        ).scalars()
        waiting += [i for i in scheduled if i in cancelled]
    for service, engine in engines.items():
        with engine.connect() as conn:
            retrying = sum(parked_counts(conn, [], retrying=True).values())
        if retrying:
            waiting.append(f"{service}: {retrying} record(s) waiting to retry")
    return waiting
