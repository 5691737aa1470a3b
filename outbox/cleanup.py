"""Bounding the outbox table in ``retain`` mode."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.engine import Connection, Engine

from outbox.table import outbox_table


def cleanup(engine: Engine, *, older_than: timedelta, batch_size: int = 10_000) -> int:
    """Delete retained outbox rows older than ``older_than`` in batches; returns rows deleted.

    Deleting a row never affects Kafka: Debezium read the insert from the WAL long before.
    Each batch is its own transaction so that a large backlog does not hold one long transaction.
    """
    if older_than < timedelta(0):
        raise ValueError("older_than must not be negative")
    older = _older(older_than)
    total = 0
    while True:
        ids = select(outbox_table.c.id).where(older).limit(batch_size).scalar_subquery()
        with engine.begin() as connection:
            deleted = connection.execute(delete(outbox_table).where(outbox_table.c.id.in_(ids)))
        total += deleted.rowcount
        if deleted.rowcount < batch_size:
            return total


def older_than(connection: Connection, age: timedelta) -> int:
    """Number of rows in the outbox table older than ``age`` (what `cleanup` would delete)."""
    query = select(func.count()).select_from(outbox_table).where(_older(age))
    return int(connection.execute(query).scalar_one())


def _older(age: timedelta) -> Any:
    """The rows created more than ``age`` ago, as `cleanup` and `older_than` pick them."""
    return outbox_table.c.created_at < datetime.now(UTC) - age


def count(connection: Connection) -> int:
    """Number of rows currently in the outbox table."""
    return int(connection.execute(select(func.count()).select_from(outbox_table)).scalar_one())
