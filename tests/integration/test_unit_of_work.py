"""One publish path: an event published by an HTTP route and one published by an inbox handler
go through the same unit of work, so they get the same headers, trace and metrics."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, select

import outbox.publish
from inbox import Inbox
from outbox import Envelope, OutboxSettings, TraceContext
from outbox.contracts import VERSION_HEADER
from outbox.table import outbox_table
from outboxkit.kernel.wire.record import encode
from outboxkit_workshop.saga import orders, payments, rules
from outboxkit_workshop.saga.common import migrations_of
from service_template import ServiceSettings, create_app

CALLER = TraceContext.new()  # the client's span, sent as traceparent with the POST
BODY = {"customer": "cust-1", "items": [{"sku": "widget", "qty": 1}], "amount": 40}


def service(stack, name: str, routers=()):
    url = stack.add_service(f"uow_{name}")
    migrations_of(name).upgrade(url)
    settings = ServiceSettings(
        name=name,
        database_url=url,
        log_json=False,
        outbox=OutboxSettings(mode="retain"),  # keep the rows to look at them
    )
    return create_app(settings, routers=routers, migrations=[migrations_of(name)])


def outbox_rows(engine):
    with engine.connect() as conn:
        return conn.execute(select(outbox_table).order_by(outbox_table.c.created_at)).all()


def as_envelope(row) -> Envelope:
    """The event of an outbox row, as the connector carries it."""
    headers = dict(row.headers or {})
    if row.traceparent:
        headers["traceparent"] = row.traceparent
    return Envelope(
        aggregate_type=row.aggregatetype,
        aggregate_id=row.aggregateid,
        event_type=row.type,
        payload=row.payload,
        headers=headers,
        event_id=row.id,
        schema_version=row.schema_version,
        created_at=row.created_at,
    )


def published_count(app, aggregate_type: str, event_type: str) -> float:
    registry = app.state.service.metrics.registry
    value = registry.get_sample_value(
        "outboxkit_outbox_events_total",
        {"aggregate_type": aggregate_type, "event_type": event_type},
    )
    return value or 0.0


@pytest.fixture(scope="module")
def apps(stack):
    return service(stack, "orders", routers=[orders.router]), service(stack, "payments")


def test_route_and_handler_publish_the_same_way(apps):
    orders_app, payments_app = apps
    orders_engine = orders_app.state.service.engine
    payments_engine = payments_app.state.service.engine

    # The route: POST /orders publishes OrderPlaced through the request's unit of work.
    with TestClient(orders_app) as client:
        response = client.post("/orders", json=BODY, headers={"traceparent": CALLER.header()})
    assert response.status_code == 201, response.text
    request_span = TraceContext.parse(response.headers["traceparent"])
    assert request_span is not None and request_span.trace_id == CALLER.trace_id
    (placed_row,) = outbox_rows(orders_engine)

    # The handler: the payments inbox applies that event as the connector delivers it.
    placed = as_envelope(placed_row)
    inbox = Inbox(
        payments_engine,
        "payments",
        payments.HANDLERS,
        window=0,
        outbox=payments_app.state.service.outbox,
        on_published=payments_app.state.service.metrics.published,
    )
    result = inbox.apply_partition([encode(placed, offset=0)])
    assert result.published_by_type() == {(rules.PAYMENT, rules.PAYMENT_CAPTURED): 1}
    (captured_row,) = outbox_rows(payments_engine)

    # Same headers: a traceparent of a new span of the same trace on both, and the version of
    # the event's contract (both publish a model), nothing else.
    route_tp = TraceContext.parse(placed_row.traceparent)
    handler_tp = TraceContext.parse(captured_row.traceparent)
    assert route_tp is not None and handler_tp is not None
    assert route_tp.trace_id == handler_tp.trace_id == CALLER.trace_id
    spans = {CALLER.span_id, request_span.span_id, route_tp.span_id, handler_tp.span_id}
    assert len(spans) == 4  # every unit and every publish is its own span
    assert placed_row.headers == captured_row.headers == {VERSION_HEADER: "1"}
    assert placed_row.schema_version == captured_row.schema_version == 1

    # Same metrics: each service counted the event it committed, once.
    assert published_count(orders_app, rules.ORDER, rules.ORDER_PLACED) == 1
    assert published_count(payments_app, rules.PAYMENT, rules.PAYMENT_CAPTURED) == 1

    # Applying the same record again is a replay: nothing published, nothing counted.
    again = inbox.apply_partition([encode(placed, offset=0)])
    assert again.published_by_type() == {} and len(outbox_rows(payments_engine)) == 1
    assert published_count(payments_app, rules.PAYMENT, rules.PAYMENT_CAPTURED) == 1


def test_an_event_without_trace_context_starts_a_new_trace(apps):
    _, payments_app = apps
    engine = payments_app.state.service.engine
    before = len(outbox_rows(engine))
    event = Envelope(
        aggregate_type=rules.ORDER,
        aggregate_id="00000000-0000-4000-8000-000000000001",
        event_type=rules.ORDER_PLACED,
        payload={**BODY, "order_id": "00000000-0000-4000-8000-000000000001"},
    )
    inbox = Inbox(
        engine,
        "payments-untraced",
        payments.HANDLERS,
        window=0,
        outbox=payments_app.state.service.outbox,
    )
    inbox.apply_partition([encode(event, offset=0)])
    rows = outbox_rows(engine)
    assert len(rows) == before + 1
    assert TraceContext.parse(rows[-1].traceparent) is not None


def test_a_rolled_back_handler_publishes_and_counts_nothing(stack):
    url = stack.add_service("uow_rollback")
    migrations_of("payments").upgrade(url)
    engine = create_engine(url)
    counted = []

    def failing(envelope, uow):
        uow.publish(aggregate_type="x", aggregate_id="1", event_type="X", payload={})
        raise RuntimeError("fails after publishing")

    inbox = Inbox(
        engine,
        "rollback",
        failing,
        window=0,
        max_attempts=2,
        outbox=OutboxSettings(mode="retain").build(),
        on_published=counted.extend,
    )
    event = Envelope("order", "k", "Any", {})
    result = inbox.apply_partition([encode(event, offset=5)])
    assert result.published_by_type() == {} and counted == []
    assert outbox_rows(engine) == []  # the savepoint took the row with it; the record is parked
    engine.dispose()


def test_the_connections_kept_cursor_survives_errors_checkouts_and_a_lost_connection(engine):
    """An outbox write reuses its connection's cursor (kept in the pool's info): after a failed
    statement and its rollback, on the next checkout, and after the connection is replaced."""
    import uuid

    from sqlalchemy import text
    from sqlalchemy.exc import DBAPIError
    from sqlalchemy.orm import Session

    from outbox import Outbox
    from outbox.statements import _CURSOR

    pool = create_engine(engine.url, pool_size=1, max_overflow=0)
    retain, kind = Outbox("retain"), f"cursor_{uuid.uuid4().hex[:8]}"

    def publish(n: int, session: Session) -> None:
        retain.publish(
            session, aggregate_type=kind, aggregate_id=f"a{n}", event_type="E", payload={"n": n}
        )

    def kept(session: Session):
        return session.connection().connection.info.get(_CURSOR)

    try:
        with Session(pool) as session, session.begin():
            publish(1, session)
            first = kept(session)
        with Session(pool) as session:  # a failed statement, then a write on the same cursor
            with pytest.raises(DBAPIError), session.begin():
                publish(2, session)
                session.execute(text("SELECT 1 / 0"))
            with session.begin():
                publish(3, session)
                assert kept(session) is first  # the next checkout, the same connection
        with Session(pool) as session, session.begin():
            retain.publish_many(  # several events: a cursor of their own, the kept one stays
                session,
                [
                    outbox.publish.NewEvent(kind, "a4", "E", {"n": 4}),
                    outbox.publish.NewEvent(kind, "a5", "E", {"n": 5}),
                ],
            )
            assert kept(session) is first
        with pool.connect() as conn:  # the pool's one connection is lost
            conn.invalidate()
        with Session(pool) as session, session.begin():
            publish(6, session)
            assert kept(session) is not first and not kept(session).closed
        with pool.connect() as conn:
            written = conn.execute(
                text("SELECT aggregateid FROM outbox WHERE aggregatetype = :k ORDER BY 1"),
                {"k": kind},
            ).scalars()
            assert list(written) == ["a1", "a3", "a4", "a5", "a6"]
    finally:
        pool.dispose()
