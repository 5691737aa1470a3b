"""Helpers shared by the Spark integration and fault tests."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

import outbox
from cdc.config import topic_for
from outboxkit.kernel.wire.record import header_map
from spark_consumers.runner import run_jobs
from spark_consumers.summary import SliceSummary
from tests.jobs import effects, make_job
from tests.kafka import read_records


def publish(
    engine: Any,
    aggregate_type: str,
    count: int,
    *,
    start: int = 0,
    keys: int = 64,
    writers: int = 4,
    per_tx: int = 500,
    poison: dict[int, bool] | None = None,
) -> None:
    """Commit ``count`` events (payload n = start..start+count-1) from concurrent writers."""

    def write(w: int) -> None:
        numbers = list(range(start + w, start + count, writers))
        for i in range(0, len(numbers), per_tx):
            with Session(engine) as session, session.begin():
                for n in numbers[i : i + per_tx]:
                    payload = {"n": n, "poison": bool(poison and poison.get(n))}
                    outbox.UnitOfWork(session).publish(
                        aggregate_type=aggregate_type,
                        aggregate_id=f"k{n % keys}",
                        event_type="Tick",
                        payload=payload,
                    )

    with ThreadPoolExecutor(writers) as pool:
        list(pool.map(write, range(writers)))


def wait_on_kafka(stack: Any, aggregate_type: str, distinct: int, timeout: float = 300) -> int:
    """Wait until ``distinct`` event ids are on the topic; returns the record count."""
    records = read_records(
        stack.bootstrap_servers(),
        [topic_for(aggregate_type)],
        until=lambda got: len({header_map(r.headers)["id"] for r in got}) >= distinct,
        timeout=timeout,
    )
    return len(records)


def effect_stats(engine: Any, consumer: str) -> tuple[int, int]:
    """(effect rows, distinct event ids) for a consumer: equal means no duplicate effect."""
    with engine.connect() as conn:
        return tuple(
            conn.execute(
                select(func.count(), func.count(effects.c.event_id.distinct())).where(
                    effects.c.consumer == consumer
                )
            ).one()
        )  # type: ignore[return-value]


def new_job(stack: Any, aggregate_type: str, **extra: Any) -> Any:
    return make_job(
        f"c-{uuid.uuid4().hex[:8]}",
        [topic_for(aggregate_type, topic_prefix=stack.settings.topic_prefix)],
        stack.database_url(),
        stack.bootstrap_servers(),
        **extra,
    )


def run_once(spark: Any, job: Any, checkpoint: Path) -> list[SliceSummary]:
    """Run the job until everything on its topics is applied; returns per-partition results."""
    rows: list[SliceSummary] = []
    run_jobs(
        [job],
        checkpoint=checkpoint,
        once=True,
        session=spark,
        trigger_seconds=0.5,
        on_batch=lambda name, bid, got: rows.extend(got),
    )
    return rows


def total(rows: list[SliceSummary], column: str) -> int:
    return sum(int(getattr(r, column)) for r in rows)
