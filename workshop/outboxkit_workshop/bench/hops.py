"""Where a saga hop's time goes: per-hop durations from the services' own timestamps, the first
hop split at the moment its event became visible in Kafka, and the consumer driver's per-batch
phases (its progress log)."""

from __future__ import annotations

import itertools
import re
import statistics
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select

HOPS = (
    "1: OrderPlaced -> payments applies it",
    "2: PaymentCaptured -> shipping applies it",
    "3: ShipmentScheduled -> orders applies it",
)


def _times(
    saga: Any, service: str, table: Any, column: str, order_ids: list[str], *where: Any
) -> dict[str, Any]:
    """``table.column`` per order of ``order_ids`` (the table keyed by order_id or id)."""
    key = table.c.order_id if "order_id" in table.c else table.c.id
    with saga.engines[service].connect() as conn:
        rows = conn.execute(select(key, table.c[column]).where(key.in_(order_ids), *where))
        return {r[0]: r[1] for r in rows}


def hop_seconds(saga: Any, order_ids: list[str]) -> dict[str, list[float]]:
    """Per hop, seconds between the transaction that published an event and the one that applied
    it, for SHIPPED orders: orders.created_at -> payments.created_at -> shipments.created_at ->
    orders.final_at (each hop: Debezium, Kafka, a Spark micro-batch, the inbox transaction)."""
    from outboxkit_workshop.saga import orders, payments, rules, shipping

    shipped_only = orders.orders.c.status == rules.SHIPPED
    placed = _times(saga, "orders", orders.orders, "created_at", order_ids, shipped_only)
    final = _times(saga, "orders", orders.orders, "final_at", order_ids, shipped_only)
    paid = _times(saga, "payments", payments.payments, "created_at", order_ids)
    shipped = _times(saga, "shipping", shipping.shipments, "created_at", order_ids)
    hops: dict[str, list[float]] = {hop: [] for hop in HOPS}
    for order_id in placed:
        chain = [placed[order_id], paid.get(order_id), shipped.get(order_id), final[order_id]]
        if None in chain:
            continue
        for hop, (a, b) in zip(HOPS, itertools.pairwise(chain), strict=True):
            hops[hop].append((b - a).total_seconds())
    return hops


def first_hop_stages(
    saga: Any, order_ids: list[str], arrived: dict[str, float]
) -> dict[str, float]:
    """Medians over the orders of hop 1 split where ``arrived`` (key -> wall time the OrderPlaced
    record became visible to a read_committed reader) says: commit -> in Kafka (the WAL decoded,
    Debezium's poll, Connect's Kafka transaction), and in Kafka -> the payments inbox transaction
    that applied it began (waiting for the trigger or the running batch, planning, the offset
    log, launching the tasks, reading)."""
    from outboxkit_workshop.saga import orders, payments

    placed = _times(saga, "orders", orders.orders, "created_at", order_ids)
    paid = _times(saga, "payments", payments.payments, "created_at", order_ids)
    to_kafka, to_applied = [], []
    for order_id, at in placed.items():
        if order_id in arrived and order_id in paid:
            to_kafka.append(arrived[order_id] - at.timestamp())
            to_applied.append(paid[order_id].timestamp() - arrived[order_id])
    if not to_kafka:
        return {}
    return {
        "commit -> visible in Kafka": statistics.median(to_kafka),
        "in Kafka -> inbox transaction begins": statistics.median(to_applied),
        "orders measured": float(len(to_kafka)),
    }


_PROGRESS = re.compile(
    r"^(\S+ \S+) INFO outboxkit\.consumers\.progress .* batch \d+: (\d+) rows, ms (.*)$"
)


def batch_phases(log: Path, since: datetime) -> dict[str, float]:
    """Median milliseconds of each micro-batch phase over the batches with input logged at or
    after ``since`` (naive local time, as the log writes it)."""
    phases: dict[str, list[float]] = {}
    for line in log.read_text(errors="replace").splitlines():
        match = _PROGRESS.match(line)
        if not match or datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f") < since:
            continue
        for item in match.group(3).split():
            name, _, ms = item.partition("=")
            phases.setdefault(name, []).append(float(ms))
    return {name: statistics.median(values) for name, values in phases.items()}
