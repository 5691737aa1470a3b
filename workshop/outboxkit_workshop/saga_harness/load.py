"""Load on the saga: orders POSTed to the orders service, round-robin over its replicas (some
retried with the same Idempotency-Key), and waiting until they reach a final state."""

from __future__ import annotations

import contextlib
import itertools
import random
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
from sqlalchemy import select
from sqlalchemy.engine import Engine

from outboxkit.kernel import retry
from outboxkit.kernel.tracing.context import TraceContext
from outboxkit.kernel.wire import TRACEPARENT
from outboxkit_workshop.saga import orders, rules


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
    # The replica (URL) that answered the first POST, and the one that answered its retry.
    served_by: str = ""
    retry_served_by: str | None = None

    @property
    def retry_mapped(self) -> bool:
        """No retry answered with another order (true for orders that were not retried)."""
        return self.retry_order_id is None


class Replicas:
    """The URLs of a service's replicas, taken in turn: each request starts at the next one
    (round-robin across the threads that share this), and each further attempt of the request
    goes to the replica after the one it last tried."""

    def __init__(self, urls: str | Sequence[str]) -> None:
        self.urls = (urls,) if isinstance(urls, str) else tuple(urls)
        if not self.urls:
            raise ValueError("no replica URL to send the requests to")
        self._turns = itertools.count()
        self._lock = threading.Lock()

    def turn(self) -> list[str]:
        """Every URL, in the order one request tries them: from the next replica in turn."""
        with self._lock:
            first = next(self._turns) % len(self.urls)
        return [*self.urls[first:], *self.urls[:first]]


@dataclass(frozen=True)
class Served:
    """A POST's answer, the replica (URL) that gave it, and how many times it was retried."""

    response: httpx.Response
    url: str
    retries: int


def place_orders(
    url: str | Sequence[str],
    count: int,
    *,
    seed: int = 7,
    concurrency: int = 8,
    retry_share: float = 0.1,
    rate: float | None = None,
    slow_share: float = 0.0,
) -> list[Placed]:
    """POST ``count`` orders to the orders service at ``url`` (one URL, or its replicas': the
    orders go to them in turn): a mix of standard and vip customers, amounts around the credit
    limits, some gizmos (scarce); a share retried with the same Idempotency-Key, on the next
    replica. With ``rate``, order n is posted at n / rate seconds after the start (an
    open-loop load). ``slow_share``: the share of orders from `slow-` customers, whose card
    gateway answers late (the payments service's ``slow_gateway_seconds``)."""
    rng = random.Random(seed)
    slow = random.Random(seed + 1)  # its own draws: the other choices stay those of the seed
    plans = []
    for n in range(count):
        customer = f"vip-{n % 17}" if rng.random() < 0.3 else f"cust-{n % 53}"
        if slow_share and slow.random() < slow_share:
            customer = f"{rules.SLOW_PREFIX}{n % 11}"
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
    replicas = Replicas(url)
    client = httpx.Client(timeout=30)

    began = time.monotonic()

    def post(n: int, plan: tuple[dict[str, Any], str, bool]) -> Placed:
        body, key, retry = plan
        if rate:
            time.sleep(max(0.0, began + n / rate - time.monotonic()))
        posted = time.time()
        urls = replicas.turn()
        first = post_until_served(client, urls, body, key)
        placed = Placed(
            first.response.json()["id"], body["customer"], body["amount"], retry, posted
        )
        placed.unavailable, placed.served_by = first.retries, first.url
        answered = TraceContext.parse(first.response.headers.get(TRACEPARENT))
        placed.trace_id = answered.trace_id if answered else None
        if retry:  # the client lost the answer and tries again with the same key, elsewhere
            after = urls.index(first.url) + 1
            again = post_until_served(client, [*urls[after:], *urls[:after]], body, key)
            placed.unavailable += again.retries
            placed.retry_served_by = again.url
            if again.response.json()["id"] != placed.order_id:
                placed.retry_order_id = again.response.json()["id"]
        return placed

    with ThreadPoolExecutor(concurrency) as pool:
        placed = list(pool.map(post, range(count), plans))
    client.close()
    return placed


# How long a client keeps retrying an order the service cannot take yet (503, no connection).
UNAVAILABLE_FOR = 180.0


def post_until_served(
    client: httpx.Client, urls: Sequence[str], body: dict[str, Any], key: str
) -> Served:
    """POST /orders as a well-behaved client, to the replicas at ``urls`` in that order: on 503
    (after its Retry-After) or when the replica cannot be reached, the same request with the
    same Idempotency-Key to the next one, for up to UNAVAILABLE_FOR seconds; any other error is
    raised. A replica that cannot be reached is passed over at once while another one is left
    to try; once every one failed in a row, the client waits a second before the next round."""
    deadline = time.monotonic() + UNAVAILABLE_FOR
    retries = 0
    while True:
        url = urls[retries % len(urls)]
        try:
            response = client.post(f"{url}/orders", json=body, headers={"Idempotency-Key": key})
            wait = float(response.headers.get("retry-after", "1"))
            if response.status_code != 503 or time.monotonic() > deadline:
                response.raise_for_status()
                return Served(response, url, retries)
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            wait = 1.0 if retries % len(urls) == len(urls) - 1 else 0.0
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
    pending: list[str] = []

    def final() -> bool:
        nonlocal pending
        pending = not_final(engine, placed)
        if progress:
            progress(len(placed) - len(pending))
        return not pending

    with contextlib.suppress(retry.WaitTimeout):
        retry.wait_until(final, timeout=timeout, what="every order final")
    return pending


def warm_up(url: str | Sequence[str], engine: Engine, *, timeout: float = 300) -> Placed:
    """One order through the whole saga, so latencies measured next exclude cold starts
    (JVM, Spark session, Python workers, first connector polls). Raises TimeoutError when it
    is not final within ``timeout`` seconds."""
    placed = place_orders(url, 1, seed=0, retry_share=0.0)[0]
    if wait_final(engine, [placed], timeout=timeout):
        raise TimeoutError("the warm-up order did not finish")
    return placed
