"""The service template on real Postgres: idempotency keys, readiness, metrics, problem+json,
and no 5xx for any input hypothesis can think of (the orders service's OpenAPI surface)."""

from __future__ import annotations

import http.client
import json
import select as io_select
import socket
import threading
import uuid
from collections.abc import Iterator
from urllib.parse import quote

import pytest
import uvicorn
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import create_engine, func, select
from sqlalchemy.engine import make_url

from outboxkit_workshop.devstack.processes import free_port, wait_until
from outboxkit_workshop.saga import orders
from outboxkit_workshop.saga.common import migrations_of, settings_of
from service_template import ServiceSettings, create_app
from service_template.idempotency import idempotency
from tests.proxy import Proxy

BODY = {"customer": "vip-ada", "items": [{"sku": "widget", "qty": 2}], "amount": 120}
JSON = {"content-type": "application/json"}


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


def test_same_key_other_body_is_409_and_creates_nothing(client, orders_url):
    key = str(uuid.uuid4())
    assert client.post("/orders", json=BODY, headers={"Idempotency-Key": key}).status_code == 201
    before = count_orders(orders_url)
    other = client.post("/orders", json={**BODY, "amount": 121}, headers={"Idempotency-Key": key})
    assert other.status_code == 409
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


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({**BODY, "amount": True}, "body.amount"),
        ({**BODY, "amount": "120"}, "body.amount"),
        ({**BODY, "amount": 120.5}, "body.amount"),
        ({**BODY, "items": [{"sku": "widget", "qty": 2.5}]}, "body.items.0.qty"),
        ({**BODY, "items": [{"sku": "widget", "qty": "2"}]}, "body.items.0.qty"),
        ({**BODY, "items": [{"sku": "widget", "qty": False}]}, "body.items.0.qty"),
        ({**BODY, "customer": 42}, "body.customer"),
    ],
)
def test_a_value_of_the_wrong_type_is_a_422_never_coerced(client, orders_url, body, where):
    before = count_orders(orders_url)
    refused = client.post("/orders", json=body)
    assert refused.status_code == 422, refused.text
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.json()["detail"].startswith(f"{where}: Input should be a valid ")
    assert count_orders(orders_url) == before


def test_a_whole_number_float_is_the_integer_json_schema_says_it_is(client, orders_url):
    # The document declares integers; JSON Schema counts 120.0 as one, so the service does too.
    placed = client.post(
        "/orders", json={**BODY, "amount": 120.0, "items": [{"sku": "widget", "qty": 2.0}]}
    )
    assert placed.status_code == 201, placed.text
    assert placed.json()["amount"] == 120 and placed.json()["items"][0]["qty"] == 2


LIMIT = ServiceSettings.model_fields["max_request_bytes"].default


def test_max_request_bytes_defaults_to_64_kib_and_reads_its_env(monkeypatch):
    assert LIMIT == 64 * 1024
    monkeypatch.setenv("ORDERS_MAX_REQUEST_BYTES", "1000")
    monkeypatch.setenv("ORDERS_DATABASE_URL", "postgresql+psycopg://orders@127.0.0.1/orders")
    assert settings_of("orders").max_request_bytes == 1000


def chunks(total: int, size: int = 8192) -> Iterator[bytes]:
    """A JSON body of ``total`` bytes (an order padded with spaces) in ``size``-byte pieces: sent
    chunked, without a Content-Length."""
    order = json.dumps(BODY).encode()
    padded = order + b" " * (total - len(order))
    for start in range(0, total, size):
        yield padded[start : start + size]


def test_a_body_over_the_limit_is_a_413_problem_with_or_without_content_length(client, orders_url):
    before = count_orders(orders_url)
    declared = client.post("/orders", content=b"".join(chunks(LIMIT + 1)), headers=JSON)
    streamed = client.post("/orders", content=chunks(LIMIT + 1), headers=JSON)
    assert "content-length" not in streamed.request.headers  # chunked
    for refused, detail in (
        (declared, f"the request body is {LIMIT + 1} bytes"),
        (streamed, f"the request body passed {LIMIT} bytes"),
    ):
        assert refused.status_code == 413, refused.text
        assert refused.headers["content-type"] == "application/problem+json"
        assert refused.json() == {
            "type": "about:blank",
            "title": "Content Too Large",
            "status": 413,
            "detail": f"{detail}; the limit is {LIMIT} bytes (setting max_request_bytes)",
        }
    assert count_orders(orders_url) == before
    # At the limit, declared or streamed, the body is the app's.
    assert client.post("/orders", content=b"".join(chunks(LIMIT)), headers=JSON).status_code == 201
    assert client.post("/orders", content=chunks(LIMIT), headers=JSON).status_code == 201
    assert count_orders(orders_url) == before + 2


@pytest.fixture(scope="module")
def server(orders_url) -> Iterator[int]:
    """The orders app under a real uvicorn (HTTP/1.1 over TCP, chunked bodies), on its port."""
    settings = ServiceSettings(name="orders", database_url=orders_url, log_json=False)
    app = create_app(settings, routers=[orders.router], migrations=[migrations_of("orders")])
    port = free_port()
    running = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=running.run, daemon=True)
    thread.start()
    wait_until("uvicorn serving the orders app", lambda: running.started, timeout=30)
    yield port
    running.should_exit = True
    thread.join(30)


def upload(port: int, total: int, *, chunked: bool) -> tuple[http.client.HTTPResponse | None, int]:
    """POST a ``total``-byte body, declared (Content-Length) or chunked, sending only while the
    server has not answered; the response (None when the server's close reset the connection
    before its answer could be read) and the bytes of body sent."""
    length = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {total}"
    head = "POST /orders HTTP/1.1\r\nHost: orders\r\nContent-Type: application/json\r\n"
    piece = b" " * 65536
    framed = f"{len(piece):x}\r\n".encode() + piece + b"\r\n" if chunked else piece
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    sock.sendall(f"{head}{length}\r\n\r\n".encode())
    sent = 0
    try:
        while sent < total:
            readable, writable, _ = io_select.select([sock], [sock], [], 60)
            if readable or not writable:
                break
            sock.sendall(framed)
            sent += len(piece)
        response = http.client.HTTPResponse(sock)
        response.begin()
    except (ConnectionResetError, BrokenPipeError):
        # The server answered and closed with our unread bytes still in its receive buffer, so
        # its kernel reset the connection (no lingering close): the answer may be lost with it.
        return None, sent
    return response, sent


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_300_mb_body_is_refused_with_413_before_it_is_sent(server, orders_url, chunked, caplog):
    """On a real server: the 413 comes while the client is still sending (the body is never
    read whole), declared or not, and the server serves the next request."""
    total = 300 * 1024 * 1024
    before = count_orders(orders_url)
    caplog.set_level("INFO")
    response, sent = upload(server, total, chunked=chunked)
    print(f"413 after {sent} of {total} bytes sent")
    assert sent < total
    if response is None:
        # The reset lost the answer on the wire; the server's own access log still has it.
        wait_until(
            "the server's log of its 413",
            lambda: any("POST /orders -> 413" in r.getMessage() for r in caplog.records),
            timeout=10,
        )
    else:
        body = json.loads(response.read())
        assert response.status == 413 and body["status"] == 413, body
        assert response.getheader("content-type") == "application/problem+json"
    assert count_orders(orders_url) == before
    again = http.client.HTTPConnection("127.0.0.1", server, timeout=60)
    again.request("POST", "/orders", body=json.dumps(BODY), headers=JSON)
    assert again.getresponse().status == 201


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


def test_a_service_started_while_its_database_is_away_serves_once_it_is_back(orders_url):
    """Started (its lifespan, the releaser of scheduled messages) while the database refuses
    connections, as during a restart or failover: it starts, answers 503 and not ready meanwhile,
    and serves as soon as the database is back, without a restart."""
    url = make_url(orders_url)
    proxy = Proxy(url.host or "127.0.0.1", url.port or 5432)
    proxy.cut()
    through = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    settings = ServiceSettings(name="orders", database_url=through, log_json=False)
    app = create_app(settings, routers=[orders.router], migrations=[migrations_of("orders")])
    try:
        with TestClient(app, raise_server_exceptions=False) as client:
            assert client.get("/health").status_code == 200  # alive, not ready
            assert client.get("/ready").status_code == 503
            away = client.post("/orders", json=BODY, headers={"Idempotency-Key": "away"})
            assert away.status_code == 503, away.text
            proxy.restore()
            back = client.post(
                "/orders", json=BODY, headers={"Idempotency-Key": f"b{uuid.uuid4()}"}
            )
            assert back.status_code == 201, back.text
            assert client.get("/ready").status_code == 200
    finally:
        proxy.cut()
