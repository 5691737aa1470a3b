"""Load on the saga: orders POSTed to the orders service (some retried with the same
Idempotency-Key), and waiting until they reach a final state."""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
from sqlalchemy import select
from sqlalchemy.engine import Engine

from outbox.trace import TraceContext
from outbox.wire import TRACEPARENT
from saga import orders, rules


@dataclass
class Placed:
    """One POSTed order, as the client saw it."""

    order_id: str
    customer: str
    amount: int
    retried: bool
    posted_at: float
    # The order id a retried POST (same Idempotency-Key) answered with, when it differs from
    # the first POST's: the idempotent receiver failed and the retry created a second order.
    retry_order_id: str | None = None
    # Times the service answered 503 (its database unreachable) or could not be reached, and the
    # client sent the same request again after Retry-After.
    unavailable: int = 0
    # The trace of the first POST (its response's traceparent): the saga's events continue it.
    trace_id: str | None = None

    @property
    def retry_mapped(self) -> bool:
        """No retry answered with another order (true for orders that were not retried)."""
        return self.retry_order_id is None


def place_orders(
    url: str,
    count: int,
    *,
    seed: int = 7,
    concurrency: int = 8,
    retry_share: float = 0.1,
    rate: float | None = None,
) -> list[Placed]:
    """POST ``count`` orders to the orders service at ``url``: a mix of standard and vip
    customers, amounts around the credit limits, some gizmos (scarce); a share retried with the
    same Idempotency-Key. With ``rate``, order n is posted at n / rate seconds after the start
    (an open-loop load)."""
    rng = random.Random(seed)
    plans = []
    for n in range(count):
        customer = f"vip-{n % 17}" if rng.random() < 0.3 else f"cust-{n % 53}"
        items = [{"sku": rng.choice(["widget", "gadget"]), "qty": rng.randint(1, 3)}]
        if rng.random() < 0.3:
            items.append({"sku": "gizmo", "qty": 1})
        amount = rng.randint(20, 700)
        plans.append(
            (
                {"customer": customer, "items": items, "amount": amount},
                str(uuid.uuid4()),
                rng.random() < retry_share,
            )
        )
    client = httpx.Client(base_url=url, timeout=30)

    began = time.monotonic()

    def post(n: int, plan: tuple[dict[str, Any], str, bool]) -> Placed:
        body, key, retry = plan
        if rate:
            time.sleep(max(0.0, began + n / rate - time.monotonic()))
        posted = time.time()
        first, unavailable = post_until_served(client, body, key)
        placed = Placed(first.json()["id"], body["customer"], body["amount"], retry, posted)
        placed.unavailable = unavailable
        answered = TraceContext.parse(first.headers.get(TRACEPARENT))
        placed.trace_id = answered.trace_id if answered else None
        if retry:  # the client lost the answer and tries again with the same key
            again, unavailable = post_until_served(client, body, key)
            placed.unavailable += unavailable
            if again.json()["id"] != placed.order_id:
                placed.retry_order_id = again.json()["id"]
        return placed

    with ThreadPoolExecutor(concurrency) as pool:
        placed = list(pool.map(post, range(count), plans))
    client.close()
    return placed


# How long a client keeps retrying an order the service cannot take yet (503, no connection).
UNAVAILABLE_FOR = 180.0


def post_until_served(
    client: httpx.Client, body: dict[str, Any], key: str
) -> tuple[httpx.Response, int]:
    """POST /orders as a well-behaved client: on 503 (after its Retry-After) or when the service
    cannot be reached, the same request with the same Idempotency-Key, for up to
    UNAVAILABLE_FOR seconds; any other error is raised. Returns the response and the retries."""
    deadline = time.monotonic() + UNAVAILABLE_FOR
    retries = 0
    while True:
        try:
            response = client.post("/orders", json=body, headers={"Idempotency-Key": key})
            wait = float(response.headers.get("retry-after", "1"))
            if response.status_code != 503 or time.monotonic() > deadline:
                response.raise_for_status()
                return response, retries
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            wait = 1.0
        retries += 1
        time.sleep(wait)


def not_final(engine: Engine, placed: list[Placed]) -> list[str]:
    """Ids of ``placed`` orders not yet in a final state (one query on the orders database
    ``engine``); orders whose retry created another order are left out."""
    ids = [p.order_id for p in placed if p.retry_mapped]
    with engine.connect() as conn:
        final = set(
            conn.execute(
                select(orders.orders.c.id).where(
                    orders.orders.c.id.in_(ids), orders.orders.c.status.in_(rules.FINAL)
                )
            ).scalars()
        )
    return [i for i in ids if i not in final]


def wait_final(
    engine: Engine,
    placed: list[Placed],
    *,
    timeout: float = 600,
    progress: Callable[[int], None] | None = None,
) -> list[str]:
    """Wait until every one of ``placed`` is in a final state; ``progress`` gets how many
    are. Returns the ids still not final when ``timeout`` ran out (empty: all final)."""
    deadline = time.monotonic() + timeout
    while True:
        pending = not_final(engine, placed)
        if progress:
            progress(len(placed) - len(pending))
        if not pending or time.monotonic() >= deadline:
            return pending
        time.sleep(0.5)


def warm_up(url: str, engine: Engine, *, timeout: float = 300) -> Placed:
    """One order through the whole saga, so latencies measured next exclude cold starts
    (JVM, Spark session, Python workers, first connector polls). Raises TimeoutError when it
    is not final within ``timeout`` seconds."""
    placed = place_orders(url, 1, seed=0, retry_share=0.0)[0]
    if wait_final(engine, [placed], timeout=timeout):
        raise TimeoutError("the warm-up order did not finish")
    return placed
