"""Outbox write overhead: the same service transaction with and without the outbox row.

The transaction is what a service endpoint does: insert one business row (an order) and, with the
outbox, publish one event about it in the same transaction (validated envelope, JSONB payload).
Variants, measured interleaved at 1, 4 and 16 concurrent writers (threads, one connection each):

- no outbox: the business row alone (the baseline);
- outbox, delete mode (the default): the outbox row is inserted and deleted in the transaction;
- outbox, retain mode: the outbox row stays (cleanup runs elsewhere).

Commits are durable (the server's defaults: fsync on, synchronous_commit on).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import (
    JSON,
    Column,
    DateTime,
    Engine,
    Integer,
    MetaData,
    String,
    Table,
    create_engine,
    func,
    insert,
    text,
)
from sqlalchemy.orm import Session

from outbox.publish import Outbox
from outboxkit.bench.report import (
    Progress,
    bar_plot,
    describe,
    machine,
    markdown_table,
    ratio,
    spread,
    spread_cells,
)

metadata = MetaData()
orders = Table(
    "bench_order",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("customer", String(64), nullable=False),
    Column("items", JSON, nullable=False),
    Column("amount", Integer, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)

WRITERS = (1, 4, 16)
VARIANTS = ("no outbox", "outbox, delete mode", "outbox, retain mode")
ITEMS = [{"sku": "widget", "qty": 2}, {"sku": "gadget", "qty": 1}]


def transaction(engine: Engine, outbox: Outbox | None, n: int) -> None:
    """One service transaction: the order row, and its event when ``outbox`` is given."""
    order_id = str(uuid.uuid4())
    with Session(engine) as session, session.begin():
        session.execute(
            insert(orders).values(id=order_id, customer=f"cust-{n % 97}", items=ITEMS, amount=n)
        )
        if outbox is not None:
            outbox.publish(
                session,
                aggregate_type="order",
                aggregate_id=order_id,
                event_type="OrderPlaced",
                payload={"id": order_id, "customer": f"cust-{n % 97}", "items": ITEMS, "n": n},
            )


def measure(
    engine: Engine, variant: str, writers: int, transactions: int, advance: Callable[[int], None]
) -> float:
    """Transactions/s of ``writers`` threads sharing ``transactions`` transactions."""
    outbox = {
        "no outbox": None,
        "outbox, delete mode": Outbox("delete"),
        "outbox, retain mode": Outbox("retain"),
    }[variant]
    per_writer = transactions // writers
    start = threading.Barrier(writers + 1)
    errors: list[BaseException] = []

    def work(w: int) -> None:
        start.wait()
        try:
            for i in range(per_writer):
                transaction(engine, outbox, w * per_writer + i)
                if i % 50 == 49:
                    advance(50)
        except BaseException as exc:  # reported by the caller
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(writers)]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    if errors:
        raise errors[0]
    return per_writer * writers / elapsed


def reset(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(text("TRUNCATE bench_order, outbox"))


def summarise(
    rates: dict[str, list[float]], params: dict[str, Any], found: dict[str, Any]
) -> tuple[dict[str, Any], str]:
    rows = []
    for writers in params["writers"]:
        base = spread(rates[f"{writers} / no outbox"])["median"]
        for variant in VARIANTS:
            samples = rates[f"{writers} / {variant}"]
            rows.append(
                [writers, variant, *spread_cells(samples), ratio(spread(samples)["median"] / base)]
            )
    md = (
        "### Outbox write overhead: service transactions/s\n\n"
        f"{params['transactions']:,} transactions per measurement (one order row, plus one "
        f"outbox event in the outbox variants), {params['reps']} repetitions interleaved; "
        "durable commits; ratio = median / median without outbox at the same writer count.\n"
        + describe(found)
        + "\n"
        + markdown_table(
            ["writers", "variant", "min tx/s", "median tx/s", "max tx/s", "ratio"], rows
        )
    )
    data = {
        "scenario": "outbox",
        "params": params,
        "machine": found,
        "transactions_per_second": {k: spread(v) | {"samples": v} for k, v in rates.items()},
    }
    return data, md


def run(
    url: str,
    out: Path,
    *,
    transactions: int = 2000,
    reps: int = 3,
    writers: Sequence[int] = WRITERS,
) -> tuple[dict[str, Any], str]:
    from migrations.runner import upgrade

    upgrade(url)
    engine = create_engine(url, pool_size=max(writers), max_overflow=0)
    metadata.create_all(engine)
    rates: dict[str, list[float]] = {f"{w} / {v}": [] for w in writers for v in VARIANTS}
    per_rep = sum(transactions // w * w for w in writers) * len(VARIANTS)
    with Progress("outbox writes", per_rep * reps) as progress:
        for rep in range(reps):
            for w in writers:
                for variant in VARIANTS:
                    progress.update(f"outbox writes: {w} writers, {variant} ({rep + 1}/{reps})")
                    reset(engine)
                    rates[f"{w} / {variant}"].append(
                        measure(engine, variant, w, transactions, progress.advance)
                    )
    reset(engine)
    engine.dispose()
    params = {"transactions": transactions, "reps": reps, "writers": list(writers)}
    data, md = summarise(rates, params, machine(url))
    data["plots"] = [
        str(
            bar_plot(
                out / "outbox.png",
                "Service transactions/s with and without the outbox row, by concurrent writers",
                rates,
                ylabel="transactions/s",
                groups=[str(w) for w in writers],
            )
        )
    ]
    return data, md + "\n![outbox write overhead](outbox.png)\n"
