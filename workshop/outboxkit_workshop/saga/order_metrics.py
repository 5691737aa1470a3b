"""The orders service's saga metrics, read from the orders table at scrape time: orders by
status, and the seconds from placed to a final state per final state (a cumulative histogram: a
final state is terminal, so each order lands in one bucket once and ``rate()`` of the buckets
gives the recent window). The orders consumer sets the final state in the Spark executors, where
no endpoint is scraped; the table is the one place every uvicorn worker and executor agrees on."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import Select, Table, func, select
from sqlalchemy.engine import Engine

from outboxkit_workshop.saga import rules

log = logging.getLogger(__name__)

# Placed -> final: four hops (orders -> payments -> shipping -> payments/orders), CDC included.
BUCKETS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)


@dataclass(frozen=True)
class StatusCount:
    """Orders in one status; for a final status, how long they took to get there."""

    status: str
    orders: int
    finished: int = 0  # orders with a final_at (all of a final status)
    seconds: float = 0.0  # sum of final_at - created_at over them
    within: Sequence[int] = ()  # per bucket of BUCKETS: how many took at most that long


def status_counts(orders: Table, buckets: Sequence[float] = BUCKETS) -> Select[tuple[object, ...]]:
    """One statement: per status, the order count and the placed -> final time histogram."""
    took = func.extract("epoch", orders.c.final_at - orders.c.created_at)
    done = orders.c.final_at.is_not(None)
    return select(
        orders.c.status,
        func.count(),
        func.count().filter(done),
        func.coalesce(func.sum(took).filter(done), 0.0),
        *(func.count().filter(took <= bound) for bound in buckets),
    ).group_by(orders.c.status)


def order_families(
    counts: Iterable[StatusCount], buckets: Sequence[float] = BUCKETS
) -> list[Metric]:
    """The metric families of one scrape."""
    by_status = GaugeMetricFamily(
        "outboxkit_saga_orders", "orders by status (orders table)", labels=["status"]
    )
    took = HistogramMetricFamily(
        "outboxkit_saga_order_seconds",
        "seconds from placed to a final state, per final state (orders table)",
        labels=["status"],
    )
    final = {status: StatusCount(status, 0, within=[0] * len(buckets)) for status in rules.FINAL}
    for count in counts:
        by_status.add_metric([count.status], count.orders)
        if count.status in final:
            final[count.status] = count
    for status, count in final.items():
        cumulative = [(str(b), n) for b, n in zip(buckets, count.within, strict=True)]
        took.add_metric([status], [*cumulative, ("+Inf", count.finished)], count.seconds)
    return [by_status, took]


class OrdersCollector(Collector):
    """Reads the orders table at each scrape; a database that does not answer leaves the series
    out of that scrape (logged), never fails it."""

    def __init__(self, engine: Engine, orders: Table) -> None:
        self.engine, self.statement = engine, status_counts(orders)

    def collect(self) -> Iterator[Metric]:
        try:
            with self.engine.connect() as conn:
                rows = conn.execute(self.statement).all()
        except Exception as exc:
            log.warning("order metrics unavailable: %s", exc)
            return
        counts = [
            StatusCount(str(r[0]), int(r[1]), int(r[2]), float(r[3]), [int(n) for n in r[4:]])
            for r in rows
        ]
        yield from order_families(counts)
