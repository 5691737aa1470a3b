"""Typed event contracts on the real stack: a model published in each outbox mode comes out of
Kafka as the same model; an event of version 1 is applied by a consumer at version 2 through its
upcaster, live, and, when the upcaster came later, by redrive of the parked event: once."""

from __future__ import annotations

import uuid
from typing import Any, Literal

import pytest
from pydantic import BaseModel, Field
from sqlalchemy import Column, Integer, MetaData, String, Table, select
from sqlalchemy.orm import Session

from cdc.config import topic_for
from inbox import Inbox, operations
from inbox.decision import Action
from inbox.typed import typed_batch
from outbox import Contracts, Event, Outbox, UnitOfWork
from outbox.contracts import VERSION_HEADER, Received
from outbox.publish import MODES
from outboxkit.kernel.wire.record import decode
from tests.kafka import read_records

pytestmark = pytest.mark.integration

effects_md = MetaData()
totals = Table(
    "it_contract_effects",
    effects_md,
    Column("consumer", String),
    Column("event_id", String),
    Column("total", Integer),
)


@pytest.fixture(scope="module", autouse=True)
def totals_table(engine):
    effects_md.create_all(engine)


class Line(BaseModel):
    sku: str
    qty: int
    price: float
    gift: str | None = None
    tags: list[str] = Field(default_factory=list)


def versions(aggregate: str) -> tuple[type[Event], type[Event]]:
    """Version 1 and version 2 of one event type on ``aggregate``: v2 renamed ``amount`` to
    ``total`` and added nested and numeric fields."""

    class PlacedV1(Event):
        event_type = "Placed"
        aggregate_type = aggregate
        key = "order_id"
        order_id: str
        amount: int

    class PlacedV2(Event):
        event_type = "Placed"
        aggregate_type = aggregate
        version = 2
        key = "order_id"
        order_id: str
        total: int
        currency: Literal["EUR", "USD"] = "EUR"
        rate: float = 1.0
        lines: list[Line] = Field(default_factory=list)
        attributes: dict[str, Any] = Field(default_factory=dict)

    return PlacedV1, PlacedV2


def upcast(payload: dict[str, Any]) -> dict[str, Any]:
    return {"order_id": payload["order_id"], "total": payload["amount"]}


def read(stack, aggregate_type: str, expected: int):
    return read_records(
        stack.bootstrap_servers(),
        [topic_for(aggregate_type)],
        until=lambda got: len(got) >= expected,
        timeout=120,
        idle_after_done=2,
    )


def publish(engine, events: list[Event], mode: str = "delete") -> None:
    with Session(engine) as session, session.begin():
        uow = UnitOfWork(session, Outbox(mode))
        for event in events:
            uow.publish_event(event)


@pytest.mark.parametrize("mode", MODES)
def test_a_model_comes_out_of_kafka_as_the_same_model_in_every_mode(
    stack, engine, aggregate_type, mode
):
    _, v2 = versions(aggregate_type)
    sent = v2(
        order_id="o-Zoë-東京-1",
        total=10**17 + 3,
        currency="USD",
        rate=0.1 + 0.2,
        lines=[Line(sku='ä\n"q"', qty=2, price=1e300, tags=["ß", ""])],
        attributes={"note": "untyped", "big": 1e300, "small": 2.5},
    )
    publish(engine, [sent], mode)
    [record] = read(stack, aggregate_type, 1)
    envelope = decode(record)
    assert envelope.headers[VERSION_HEADER] == "2"
    received = Contracts([v2]).decode(envelope)
    # A typed field comes back as its type: Postgres prints the float 1e300 as 301 digits, the
    # model makes it the float again.
    assert received.model_dump(exclude={"attributes"}) == sent.model_dump(exclude={"attributes"})
    assert isinstance(received.lines[0].price, float)
    # A field typed Any gets what JSON gives back: those 301 digits are an int, equal in value.
    assert received.attributes == {"note": "untyped", "big": 10**300, "small": 2.5}


def test_a_v1_event_is_upcast_live_and_through_redrive_once_the_upcaster_is_deployed(
    stack, engine, aggregate_type
):
    v1, v2 = versions(aggregate_type)
    publish(engine, [v1(order_id="o-1", amount=7), v1(order_id="o-1", amount=8)])
    records = read(stack, aggregate_type, 2)
    assert [decode(r).headers[VERSION_HEADER] for r in records] == ["1", "1"]

    def consumer_at_v2(consumer: str, upcaster: bool) -> Inbox:
        contracts = Contracts([v2])
        if upcaster:
            contracts.upcaster(v2, from_version=1)(upcast)

        def apply(received: list[Received[Any]], uow: UnitOfWork) -> None:
            for r in received:
                uow.session.execute(
                    totals.insert().values(
                        consumer=consumer, event_id=str(r.envelope.event_id), total=r.event.total
                    )
                )

        return Inbox(engine, consumer, typed_batch(contracts, apply))

    def applied(consumer: str) -> list[int]:
        with engine.connect() as conn:
            query = select(totals.c.total).where(totals.c.consumer == consumer)
            return sorted(conn.execute(query).scalars())

    live = f"c-{uuid.uuid4().hex[:8]}"
    assert consumer_at_v2(live, upcaster=True).apply_partition(records).count(Action.APPLY) == 2
    assert applied(live) == [7, 8]

    # A consumer deployed at v2 before its upcaster: both parked (the second behind the first,
    # same key) with the reason, nothing applied.
    late = f"c-{uuid.uuid4().hex[:8]}"
    consumer_at_v2(late, upcaster=False).apply_partition(records)
    parked = operations.list_parked(engine, late)
    assert len(parked) == 2 and applied(late) == []
    assert "no upcaster for Placed v1 -> v2" in parked[0]["error"]
    # The upcaster is deployed; redrive goes through the same decoding and applies them once.
    fixed = consumer_at_v2(late, upcaster=True)
    done = operations.redrive(fixed, records[0].topic, records[0].partition)
    assert (done.applied, done.still_parked) == (2, 0)
    assert applied(late) == [7, 8] and operations.list_parked(engine, late) == []
    assert fixed.apply_partition(records).count(Action.SKIP_REPLAY) == 2
    assert applied(late) == [7, 8]
