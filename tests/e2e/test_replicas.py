"""Two replicas per saga service, each its own process on its own port, sharing the service's
database: orders spread over both orders replicas, one replica killed -9 mid-load with requests
in flight and started again on its port, and still every order final once; `saga status` lists
every replica."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from outboxkit_workshop.devstack.processes import alive
from outboxkit_workshop.devstack.stack import Stack
from outboxkit_workshop.saga.common import SERVICES
from outboxkit_workshop.saga_harness.load import Placed
from outboxkit_workshop.saga_harness.processes import Saga, replica_names, service_of
from tests.e2e.test_saga import assert_consistent, wait_all_final

REPLICAS = [name for service in SERVICES for name in (service, f"{service}-2")]


def test_replica_names_keep_replica_one_under_the_service_name() -> None:
    assert replica_names("orders", 1) == ["orders"]
    assert replica_names("orders", 3) == ["orders", "orders-2", "orders-3"]
    assert [service_of(n) for n in ("orders", "orders-2", "payments-12")] == [
        "orders",
        "orders",
        "payments",
    ]
    assert [service_of(n) for n in ("consumers", "orders-1", "orders-x", "billing-2")] == [None] * 4


@pytest.fixture
def replicated(saga: Saga) -> Iterator[Saga]:
    """The session saga with two replicas per service for the test; back to one after (the
    second replicas stopped and forgotten, every first replica running)."""
    saga.scale(2)
    try:
        saga.start()
        yield saga
    finally:
        saga.scale(1)
        saga.start()


def saga_cli(stack: Stack, monkeypatch: pytest.MonkeyPatch, *argv: str) -> tuple[int, Any]:
    """`outboxkit dev saga ARGV --json` on the session stack: exit code and report."""
    from outboxkit.cli import main

    monkeypatch.setenv("OUTBOXKIT_STACK_DIR", str(stack.dir))
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        code = main(["dev", "saga", *argv, "--json"])
    return code, json.loads(output.getvalue())


def test_orders_spread_over_two_replicas_survive_one_killed_mid_load(
    replicated: Saga, stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    saga = replicated
    code, listed = saga_cli(stack, monkeypatch, "status")
    by_name = {p["name"]: p for p in listed}
    assert code == 0
    assert list(by_name) == [*REPLICAS, "consumers"]
    assert {n: (by_name[n]["service"], by_name[n]["health"]) for n in REPLICAS} == {
        n: (service_of(n), "ready") for n in REPLICAS
    }
    assert {n: by_name[n]["pid"] for n in REPLICAS} == {n: saga.pids[n] for n in REPLICAS}
    assert len({by_name[n]["port"] for n in REPLICAS}) == len(REPLICAS)  # a port each
    urls = saga.service_urls("orders")
    assert urls == [saga.urls["orders"], saga.urls["orders-2"]]
    killed_pid, port = saga.pids["orders-2"], saga.ports["orders-2"]

    placed: list[Placed] = []
    failure: list[BaseException] = []

    def place() -> None:
        try:
            placed.extend(saga.place_orders(60, seed=61, rate=10, retry_share=0.3))
        except BaseException as exc:  # raised below, in the test's thread
            failure.append(exc)

    loader = threading.Thread(target=place, name="replica-load")
    loader.start()
    time.sleep(1.5)
    # Frozen first, so that requests it accepted are in flight, unanswered (perhaps committed,
    # perhaps holding their Idempotency-Key's row lock) when the kill -9 cuts them.
    os.kill(killed_pid, signal.SIGSTOP)
    time.sleep(1.0)
    code, listed = saga_cli(stack, monkeypatch, "kill", "orders-2")
    print(f"[fault] killed orders-2 (pid {killed_pid}) with requests in flight")
    assert code == 0
    assert {p["name"]: p["health"] for p in listed}["orders-2"] == "stopped"
    time.sleep(1.5)
    saga.start(["orders-2"])  # as a supervisor would, on its port
    loader.join(timeout=300)
    assert not failure, f"placing orders failed: {failure[0]!r}"

    served = Counter(p.served_by for p in placed)
    retried_elsewhere = sum(1 for p in placed if p.retry_served_by not in (None, p.served_by))
    unavailable = sum(p.unavailable for p in placed)
    print(
        f"served by {dict(served)}; retries answered by the other replica {retried_elsewhere}; "
        f"requests retried after orders-2 failed them {unavailable}"
    )
    assert set(served) == set(urls) and len(placed) == 60
    assert retried_elsewhere > 0  # the Idempotency-Key holds across replicas
    assert unavailable > 0  # the requests orders-2 was cut in or refused went to orders
    wait_all_final(saga, placed)
    assert_consistent(saga, placed)  # every order final once; effects once; audit clean

    assert saga.ports["orders-2"] == port and saga.pids["orders-2"] != killed_pid
    assert not alive(killed_pid)
    code, listed = saga_cli(stack, monkeypatch, "status")
    assert code == 0
    assert {
        p["name"]: (p["pid"], p["port"], p["health"]) for p in listed if p["name"] in REPLICAS
    } == {n: (saga.pids[n], saga.ports[n], "ready") for n in REPLICAS}
