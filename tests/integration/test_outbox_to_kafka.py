"""Commit business + outbox rows, read what Debezium put on Kafka: what only the table modes
have (the record itself, in every mode, is tests/integration/test_outbox_modes.py)."""

from __future__ import annotations

import json
import uuid

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, func, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

import outbox
from cdc.config import topic_for
from outboxkit_workshop.devstack.stack import Stack
from tests.kafka import read_records

business = MetaData()
orders = Table(
    "it_orders", business, Column("id", String, primary_key=True), Column("amount", Integer)
)


@pytest.fixture(scope="module", autouse=True)
def business_table(engine: Engine) -> None:
    business.create_all(engine)


def read(stack: Stack, aggregate_type: str, expected: int):
    return read_records(
        stack.bootstrap_servers(),
        [topic_for(aggregate_type)],
        until=lambda got: len(got) >= expected,
        timeout=90,
    )


def test_invalid_event_fails_before_commit_and_loses_the_business_row(engine, aggregate_type):
    order_id = f"bad-{uuid.uuid4().hex[:8]}"
    with (
        pytest.raises(outbox.InvalidEvent, match="not JSON serialisable"),
        Session(engine) as session,
        session.begin(),
    ):
        session.execute(orders.insert().values(id=order_id, amount=1))
        outbox.UnitOfWork(session).publish(
            aggregate_type=aggregate_type,
            aggregate_id=order_id,
            event_type="X",
            payload={"when": object()},
        )
    with Session(engine) as session:
        assert session.scalar(select(func.count()).where(orders.c.id == order_id)) == 0


def test_delete_mode_leaves_no_row_and_retain_mode_is_cleaned_up(stack, engine, aggregate_type):
    from datetime import timedelta

    from outbox.cleanup import cleanup, count

    with engine.connect() as conn:
        before = count(conn)
    with Session(engine) as session, session.begin():
        outbox.UnitOfWork(session).publish(
            aggregate_type=aggregate_type,
            aggregate_id="d",
            event_type="X",
            payload={"mode": "delete"},
        )
        outbox.Outbox(mode="retain").publish(
            session,
            aggregate_type=aggregate_type,
            aggregate_id="r",
            event_type="X",
            payload={"mode": "retain"},
        )
    with engine.connect() as conn:
        assert count(conn) == before + 1  # only the retained row stays
    records = read(stack, aggregate_type, 2)
    assert sorted(json.loads(r.value)["mode"] for r in records) == ["delete", "retain"]
    assert cleanup(engine, older_than=timedelta(0)) >= 1
    with engine.connect() as conn:
        assert count(conn) == 0
