"""kill -9 of an async service mid-transaction (the saga's orders service: async def routes on
an AsyncSession, delete mode's row written with COMMIT): clients keep posting orders, each with
its Idempotency-Key, and retry what failed once the service is back. Afterwards every committed
order has its OrderPlaced event and its payment timer, no event exists without its order, no
event was written twice, and every key made one order."""

from __future__ import annotations

import random
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine

from migrations import runner
from outboxkit_workshop.devstack.processes import free_port, start, stop, wait_until
from outboxkit_workshop.saga.common import migrations_of
from outboxkit_workshop.saga_harness.load import post_until_served
from outboxkit_workshop.saga_harness.processes import ROOT

CLIENTS, ORDERS_EACH = 6, 40
SEEN = """
CREATE TABLE it_seen (n bigserial PRIMARY KEY, id uuid, aggregateid text, type text);
CREATE FUNCTION it_seen() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO it_seen (id, aggregateid, type) VALUES (NEW.id, NEW.aggregateid, NEW.type);
RETURN NEW; END $$;
CREATE TRIGGER it_seen AFTER INSERT ON outbox FOR EACH ROW EXECUTE FUNCTION it_seen();
"""


def serve(url: str, bootstrap: str, port: int, log: Path) -> int:
    env = {
        "ORDERS_DATABASE_URL": url,
        "ORDERS_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "ORDERS_LOG_JSON": "false",
        "ORDERS_PAYMENT_TIMEOUT_SECONDS": "3600",  # the timers stay scheduled, counted below
        "ORDERS_OUTBOX__RELEASE__ENABLED": "false",
    }
    argv = [sys.executable, "-m", "outboxkit_workshop.saga.serve", "orders", "--port", str(port)]
    pid = start("orders", [*argv, "--host", "127.0.0.1"], log=log, env=env, cwd=ROOT)
    ready = f"http://127.0.0.1:{port}/ready"
    wait_until("orders", lambda: _ok(ready), timeout=60, pid=pid, log=log)
    return pid


def _ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_kill_9_of_the_async_orders_service_loses_nothing_and_doubles_nothing(
    stack, empty_database: str, tmp_path: Path
) -> None:
    runner.upgrade(empty_database)
    migrations_of("orders").upgrade(empty_database)
    engine: Engine = create_engine(empty_database)
    with engine.begin() as conn:
        conn.exec_driver_sql(SEEN)
    port, log = free_port(), tmp_path / "orders.log"
    pid = serve(empty_database, stack.bootstrap_servers(), port, log)
    posted: dict[str, str] = {}  # Idempotency-Key -> the order id its 201 named
    lock, failures = threading.Lock(), []

    def client(seed: int) -> None:
        rng = random.Random(seed)
        with httpx.Client(timeout=10) as http:
            for _ in range(ORDERS_EACH):
                key = str(uuid.uuid4())
                body = {
                    "customer": f"cust-{rng.randint(1, 50)}",
                    "items": [{"sku": "widget", "qty": rng.randint(1, 3)}],
                    "amount": rng.randint(20, 300),
                }
                try:
                    served = post_until_served(http, [f"http://127.0.0.1:{port}"], body, key)
                except Exception as exc:  # the assertion below names it
                    with lock:
                        failures.append(f"{key}: {exc!r}")
                    continue
                with lock:
                    posted[key] = served.response.json()["id"]

    threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
    for thread in threads:
        thread.start()
    total = CLIENTS * ORDERS_EACH
    while len(posted) < total * random.uniform(0.2, 0.5):
        time.sleep(0.01)
    stop(pid, sig=9)  # mid-load: some transactions are open, some commits in flight
    print(f"killed the orders service after {len(posted)} orders")
    pid = serve(empty_database, stack.bootstrap_servers(), port, log)
    try:
        for thread in threads:
            thread.join(timeout=300)
    finally:
        stop(pid)
    assert failures == [] and len(posted) == total

    def column(sql: str) -> list[str]:
        with engine.connect() as conn:
            return [str(v) for v in conn.execute(text(sql)).scalars()]

    orders = column("SELECT id FROM orders")
    placed = column("SELECT aggregateid FROM it_seen WHERE type = 'OrderPlaced'")
    timers = column("SELECT aggregateid FROM outbox_scheduled WHERE type = 'PaymentTimedOut'")
    assert len(orders) == len(set(orders)) == total  # one order per key: retries made none
    assert sorted(placed) == sorted(orders)  # each committed order's event, once; none orphaned
    assert sorted(timers) == sorted(orders)
    assert len(set(column("SELECT id FROM it_seen"))) == len(placed)  # no event id twice
    assert set(posted.values()) == set(orders)  # every 201 named an order that committed
    engine.dispose()
