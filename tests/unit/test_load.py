"""The load generator's client side: requests spread round-robin over a service's replicas, a
retry sent to another replica than the one that failed, the same Idempotency-Key throughout."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable

import httpx
import pytest

from outboxkit_workshop.saga_harness import load

A, B, C = "http://a:1", "http://b:2", "http://c:3"
BODY = {"customer": "cust-1", "items": [{"sku": "widget", "qty": 1}], "amount": 50}


def test_each_request_starts_at_the_next_replica_and_tries_the_others_after_it() -> None:
    replicas = load.Replicas([A, B, C])
    assert [replicas.turn() for _ in range(4)] == [[A, B, C], [B, C, A], [C, A, B], [A, B, C]]
    assert load.Replicas(A).turn() == [A]
    with pytest.raises(ValueError, match="no replica URL"):
        load.Replicas([])


def test_threads_sharing_the_replicas_get_them_evenly() -> None:
    replicas = load.Replicas([A, B])
    firsts: list[str] = []
    lock = threading.Lock()

    def take() -> None:
        for _ in range(250):
            first = replicas.turn()[0]
            with lock:
                firsts.append(first)

    threads = [threading.Thread(target=take) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert Counter(firsts) == {A: 1000, B: 1000}


class FakeOrders:
    """The orders service behind several replica hosts, in one store of Idempotency-Keys (as
    the replicas share one database); ``down`` hosts refuse connections."""

    def __init__(self, down: Iterable[str] = (), unavailable: dict[str, int] | None = None):
        self.down = set(down)
        self.unavailable = dict(unavailable or {})  # host: 503s to answer before serving
        self.keys: dict[str, str] = {}
        self.hosts: list[str] = []  # the host of every request, in order

    def __call__(self, request: httpx.Request) -> httpx.Response:
        host = f"{request.url.scheme}://{request.url.host}:{request.url.port}"
        self.hosts.append(host)
        if host in self.down:
            raise httpx.ConnectError("connection refused", request=request)
        if self.unavailable.get(host):
            self.unavailable[host] -= 1
            return httpx.Response(503, headers={"Retry-After": "2"})
        key = request.headers["Idempotency-Key"]
        order_id = self.keys.setdefault(key, str(uuid.uuid4()))
        return httpx.Response(201, json={"id": order_id})


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The client's sleeps between attempts (on this thread and the load's pool), recorded
    instead of slept; a thread an earlier test left running sleeps as usual and is not
    recorded."""
    slept: list[float] = []
    real = time.sleep

    def record(seconds: float) -> None:
        here = threading.current_thread()
        if here is threading.main_thread() or here.name.startswith("ThreadPoolExecutor"):
            slept.append(seconds)
        else:
            real(seconds)

    monkeypatch.setattr(time, "sleep", record)  # outboxkit_workshop.saga_harness.load's too
    return slept


def client_of(service: Callable[[httpx.Request], httpx.Response]) -> httpx.Client:
    return httpx.Client(transport=httpx.MockTransport(service))


def test_a_replica_that_cannot_be_reached_is_passed_over_at_once(waits: list[float]) -> None:
    service = FakeOrders(down={A})
    served = load.post_until_served(client_of(service), [A, B], BODY, "k1")
    assert (served.url, served.retries, served.response.status_code) == (B, 1, 201)
    assert service.hosts == [A, B]
    assert waits == [0.0]


def test_when_every_replica_failed_in_a_row_the_client_waits_before_the_next_round(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    service = FakeOrders(down={A, B})
    waits: list[float] = []

    def recover(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 3:  # B comes back after the third attempt
            service.down.discard(B)

    monkeypatch.setattr(time, "sleep", recover)
    served = load.post_until_served(client_of(service), [A, B], BODY, "k2")
    assert served.url == B and served.retries == 3
    assert service.hosts == [A, B, A, B]
    assert waits == [0.0, 1.0, 0.0]


def test_a_503_is_retried_after_its_retry_after_on_the_next_replica(waits: list[float]) -> None:
    service = FakeOrders(unavailable={A: 1})
    served = load.post_until_served(client_of(service), [A, B], BODY, "k3")
    assert (served.url, served.retries) == (B, 1)
    assert waits == [2.0]


def test_other_errors_are_raised(waits: list[float]) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        return httpx.Response(422, json={"detail": "no"})

    with pytest.raises(httpx.HTTPStatusError):
        load.post_until_served(client_of(refuse), [A, B], BODY, "k4")
    assert waits == []


@pytest.fixture
def fake_orders(monkeypatch: pytest.MonkeyPatch) -> FakeOrders:
    """`place_orders`' HTTP client talking to a FakeOrders (no replica down to start with)."""
    service = FakeOrders()
    real = httpx.Client
    monkeypatch.setattr(
        httpx,
        "Client",
        lambda **options: real(transport=httpx.MockTransport(service), **options),
    )
    return service


def test_orders_are_spread_over_the_replicas_and_retried_on_another(
    fake_orders: FakeOrders, waits: list[float]
) -> None:
    placed = load.place_orders([A, B], 40, seed=3, concurrency=4, retry_share=0.5)
    assert Counter(p.served_by for p in placed) == {A: 20, B: 20}
    retried = [p for p in placed if p.retried]
    assert retried
    assert all(p.retry_served_by not in (None, p.served_by) for p in retried)
    assert all(p.retry_mapped for p in placed)  # one order per key, whichever replica
    assert len(fake_orders.keys) == 40
    assert sum(p.unavailable for p in placed) == 0


def test_orders_meant_for_a_dead_replica_are_served_by_the_other(
    fake_orders: FakeOrders, waits: list[float]
) -> None:
    fake_orders.down.add(B)
    placed = load.place_orders([A, B], 20, seed=3, concurrency=4, retry_share=0.0)
    assert {p.served_by for p in placed} == {A}
    assert sum(p.unavailable for p in placed) == 10  # the half B's turn fell on, once each
    assert set(waits) == {0.0}  # never a pause: the other replica was up
    assert len(fake_orders.keys) == 20


def test_one_url_works_as_before(fake_orders: FakeOrders, waits: list[float]) -> None:
    placed = load.place_orders(A, 5, seed=3, retry_share=1.0)
    assert {(p.served_by, p.retry_served_by) for p in placed} == {(A, A)}
    assert all(p.retry_mapped for p in placed)
