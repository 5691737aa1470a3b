"""Commit business + outbox rows, read what Debezium put on Kafka."""

from __future__ import annotations

import json
import uuid

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, func, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

import outbox
from cdc.config import topic_for
from devstack.stack import Stack
from outbox.record import decode, header_map
from tests.kafka import read_records

TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
business = MetaData()
orders = Table(
    "it_orders", business, Column("id", String, primary_key=True), Column("amount", Integer)
)


@pytest.fixture(scope="module", autouse=True)
def business_table(engine: Engine) -> None:
    business.create_all(engine)


def read(stack: Stack, aggregate_type: str, expected: int, extra_wait: float = 3.0):
    return read_records(
        stack.bootstrap_servers(),
        [topic_for(aggregate_type)],
        until=lambda got: len(got) >= expected,
        timeout=90,
        idle_after_done=extra_wait,
    )


def test_committed_event_arrives_once_with_key_value_and_headers(stack, engine, aggregate_type):
    order_id = f"o-{uuid.uuid4().hex[:8]}"
    payload = {
        "customer": "Zoë ✓ 東京",
        "items": [{"sku": "a", "qty": 1, "gift": None}, 2, "three", None],
        "nested": {"deep": {"deeper": [[], {}, [None]]}},
        "note": None,
        "blob": "x" * 500_000,
    }
    with Session(engine) as session, session.begin():
        session.execute(orders.insert().values(id=order_id, amount=10))
        sent = outbox.UnitOfWork(session).publish(
            aggregate_type=aggregate_type,
            aggregate_id=order_id,
            event_type="OrderPlaced",
            payload=payload,
            headers={"traceparent": TP, "tenant": "acme"},
        )
    records = read(stack, aggregate_type, 1)
    assert len(records) == 1
    record = records[0]
    assert record.key == order_id.encode()
    assert json.loads(record.value) == payload
    hdrs = header_map(record.headers)
    assert hdrs["id"] == str(sent.event_id)
    assert hdrs["eventType"] == "OrderPlaced"
    assert hdrs["aggregateType"] == aggregate_type
    assert hdrs["traceparent"] == TP
    envelope = decode(record)
    assert envelope.headers == {"tenant": "acme", "traceparent": TP}
    assert envelope.event_id == sent.event_id


def test_rollback_sends_nothing_and_two_publishes_send_two(stack, engine, aggregate_type):
    with Session(engine) as session, session.begin():
        outbox.UnitOfWork(session).publish(
            aggregate_type=aggregate_type,
            aggregate_id="rolled",
            event_type="X",
            payload={},
        )
        session.rollback()
    with Session(engine) as session, session.begin():
        for n in range(2):
            outbox.UnitOfWork(session).publish(
                aggregate_type=aggregate_type,
                aggregate_id="twice",
                event_type="X",
                payload={"n": n},
            )
    records = read(stack, aggregate_type, 2, extra_wait=4.0)
    assert [r.key for r in records] == [b"twice", b"twice"]
    assert [json.loads(r.value)["n"] for r in records] == [0, 1]


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
