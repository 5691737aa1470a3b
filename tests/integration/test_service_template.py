"""The service template on real Postgres: idempotency keys, readiness, metrics, problem+json,
and no 5xx for any input hypothesis can think of (the orders service's OpenAPI surface)."""

from __future__ import annotations

import uuid
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import create_engine, func, select
from sqlalchemy.engine import make_url

from inbox.tables import idempotency
from saga import orders
from saga.common import migrations_of
from service_template import ServiceSettings, create_app
from tests.proxy import Proxy

BODY = {"customer": "vip-ada", "items": [{"sku": "widget", "qty": 2}], "amount": 120}


@pytest.fixture(scope="module")
def orders_url(stack):
    url = stack.add_service("tmpl_orders")
    migrations_of("orders").upgrade(url)
    return url


@pytest.fixture(scope="module")
def client(orders_url):
    settings = ServiceSettings(name="orders", database_url=orders_url, log_json=False)
    app = create_app(settings, routers=[orders.router], migrations=[migrations_of("orders")])
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


def count_orders(url: str) -> int:
    engine = create_engine(url)
    with engine.connect() as conn:
        n = conn.execute(select(func.count()).select_from(orders.orders)).scalar_one()
    engine.dispose()
    return int(n)


def test_same_key_same_body_returns_the_first_response_and_creates_nothing(client, orders_url):
    key = str(uuid.uuid4())
    before = count_orders(orders_url)
    first = client.post("/orders", json=BODY, headers={"Idempotency-Key": key})
    again = client.post("/orders", json=BODY, headers={"Idempotency-Key": key})
    assert first.status_code == again.status_code == 201
    assert first.json() == again.json() and again.headers["Idempotent-Replayed"] == "true"
    assert count_orders(orders_url) == before + 1


def test_same_key_other_body_is_422_and_creates_nothing(client, orders_url):
    key = str(uuid.uuid4())
    assert client.post("/orders", json=BODY, headers={"Idempotency-Key": key}).status_code == 201
    before = count_orders(orders_url)
    other = client.post("/orders", json={**BODY, "amount": 121}, headers={"Idempotency-Key": key})
    assert other.status_code == 422
    assert other.headers["content-type"] == "application/problem+json"
    assert "different request body" in other.json()["detail"]
    assert count_orders(orders_url) == before


def test_without_a_key_each_post_is_a_new_order(client, orders_url):
    before = count_orders(orders_url)
    ids = {client.post("/orders", json=BODY).json()["id"] for _ in range(2)}
    assert len(ids) == 2 and count_orders(orders_url) == before + 2


def test_order_view_has_its_timeline_and_unknown_is_404_problem(client):
    created = client.post("/orders", json=BODY).json()
    view = client.get(f"/orders/{created['id']}").json()
    assert view["status"] == "PENDING"
    assert [e["event_type"] for e in view["timeline"]] == ["OrderPlaced"]
    missing = client.get(f"/orders/{uuid.uuid4()}")
    assert missing.status_code == 404 and "not found" in missing.json()["detail"]


def test_bad_input_is_a_4xx_problem_with_a_message(client):
    bad_json = client.post(
        "/orders", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert bad_json.status_code == 422 and bad_json.json()["detail"]
    negative = client.post("/orders", json={**BODY, "amount": -5})
    assert negative.status_code == 422 and "amount" in negative.json()["detail"]
    long_key = client.post("/orders", json=BODY, headers={"Idempotency-Key": "k" * 300})
    assert long_key.status_code == 400


def test_health_ready_metrics_and_trace(client, orders_url):
    assert client.get("/health").json()["status"] == "alive"
    assert client.get("/ready").status_code == 200
    trace = "0af7651916cd43dd8448eb211c80319c"
    client.post("/orders", json=BODY, headers={"traceparent": f"00-{trace}-b7ad6b7169203331-01"})
    metrics = client.get("/metrics").text
    assert (
        'outboxkit_outbox_events_total{aggregate_type="order",event_type="OrderPlaced"}' in metrics
    )
    assert "outboxkit_http_requests_total" in metrics
    # Not ready when the service's own migrations are behind.
    migrations_of("orders").downgrade(orders_url, "base")
    try:
        not_ready = client.get("/ready")
        assert (
            not_ready.status_code == 503 and "orders_alembic_version" in not_ready.json()["detail"]
        )
    finally:
        migrations_of("orders").upgrade(orders_url)


def test_a_rolled_back_request_leaves_no_idempotency_key(client, orders_url):
    key = str(uuid.uuid4())
    assert (
        client.post(
            "/orders", json={**BODY, "amount": 0}, headers={"Idempotency-Key": key}
        ).status_code
        == 422
    )
    engine = create_engine(orders_url)
    with engine.connect() as conn:
        kept = conn.execute(select(idempotency).where(idempotency.c.key == key)).first()
    engine.dispose()
    assert kept is None


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=10,
)
order_like = st.fixed_dictionaries(
    {},
    optional={
        "customer": st.text(max_size=80) | json_values,
        "items": st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "sku": st.text(max_size=40) | json_values,
                    "qty": st.integers() | json_values,
                },
            ),
            max_size=25,
        )
        | json_values,
        "amount": st.integers() | json_values,
        "extra": json_values,
    },
)
header_text = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=300)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=order_like | json_values, key=st.none() | header_text, order_id=st.text(max_size=60))
def test_no_input_makes_a_5xx(client, body, key, order_id):
    headers = {} if key is None else {"Idempotency-Key": key}
    posted = client.post("/orders", json=body, headers=headers)
    assert posted.status_code < 500, posted.text
    got = client.get("/orders/" + quote(order_id, safe=""))
    assert got.status_code < 500, got.text


def test_an_unreachable_database_is_a_503_with_retry_after_and_the_service_recovers(orders_url):
    """The connection to the database cut (existing connections reset, the port refusing) and
    restored, with the same app throughout: 503 + Retry-After + problem+json while it is down,
    never a 500; /ready not ready; served again once it is back, stale pooled connections
    detected."""
    url = make_url(orders_url)
    proxy = Proxy(url.host or "127.0.0.1", url.port or 5432)
    through = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    settings = ServiceSettings(name="orders", database_url=through, log_json=False)
    app = create_app(settings, routers=[orders.router], migrations=[migrations_of("orders")])
    try:
        with TestClient(app, raise_server_exceptions=False) as client:
            assert client.post("/orders", json=BODY).status_code == 201  # the pool is warm
            proxy.cut()
            for attempt in range(3):
                down = client.post("/orders", json=BODY, headers={"Idempotency-Key": f"d{attempt}"})
                assert down.status_code == 503, down.text
                assert down.headers["content-type"] == "application/problem+json"
                assert int(down.headers["retry-after"]) > 0
                assert "unreachable" in down.json()["detail"]
            assert client.get(f"/orders/{uuid.uuid4()}").status_code == 503
            assert client.get("/ready").status_code == 503
            proxy.restore()
            key = f"back-{uuid.uuid4()}"
            back = client.post("/orders", json=BODY, headers={"Idempotency-Key": key})
            assert back.status_code == 201, back.text
            assert client.get("/ready").status_code == 200
    finally:
        proxy.cut()
