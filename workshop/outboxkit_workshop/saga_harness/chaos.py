"""A fault campaign on the running saga (`outboxkit dev chaos`): randomized rounds of every fault
an operator meets, while orders flow at a steady rate with client retries; then every order
final, the saga's invariants, and the audit of its consumers.

One fault per round, each kind in turn in a shuffled order; the kinds
(`outboxkit_workshop.saga_harness.faults`) are those the stack's shape can strike, or the ones
asked for:

- on any shape: kill -9 of the consumer driver or of a service replica (a random one when the
  service runs several), a Postgres crash, a Kafka node's restart (SIGTERM; a random node on a
  cluster: a rolling restart's step), every connector and task restarted through Connect's REST
  API, and on one Connect worker its kill -9;
- on 3+ Kafka nodes: kill -9 of the node leading a saga topic's partition, of the transaction
  coordinator of a saga connector task's producer (KIP-618), of the active controller;
- on 2+ Connect workers: kill -9 of the worker running a saga connector's task; the old worker
  starts again once the task runs on another one (whose producer fenced the old one's);
- on an embedded Spark cluster: kill -9 of a worker with its executors, or of one executor.

Each is repaired as a process supervisor (systemd, Kubernetes) would: the struck node or process
is started again after a pause (`Stack.up` starts only what is down), and nothing else is
touched; an executor is replaced by its worker. Each round records the node it struck and its
recovery time: from the fault until a probe order, placed as soon as the fault was repaired
(spread over the orders replicas), reaches a final state (the saga's ordinary latency
included; the baseline probe before the first round measures it).
"""

from __future__ import annotations

import contextlib
import random
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from confluent_kafka import KafkaException

from outboxkit.kernel.errors import is_transient
from outboxkit.kernel.retry import wait_until
from outboxkit_workshop.devstack import faults as nodes
from outboxkit_workshop.devstack.stack import Stack
from outboxkit_workshop.devstack.state import EMBEDDED, Component
from outboxkit_workshop.devstack.supervision import supervised
from outboxkit_workshop.saga import rules
from outboxkit_workshop.saga_harness import load
from outboxkit_workshop.saga_harness.faults import (
    ROUTINE as ROUTINE,  # the e2e tests strike these mid-run
)
from outboxkit_workshop.saga_harness.faults import Shape, check, inject, offered, repaired
from outboxkit_workshop.saga_harness.invariants import Report
from outboxkit_workshop.saga_harness.kafka_scan import Scan, scan
from outboxkit_workshop.saga_harness.load import Placed
from outboxkit_workshop.saga_harness.processes import Saga

# The kinds a single-node stack offers, its default
# (`outboxkit_workshop.saga_harness.faults.NAMES`: every
# kind).
KINDS = offered(Shape())


def _embedded(component: Component) -> int:
    return len(component.nodes) if component.mode == EMBEDDED else 0


def shape_of(stack: Stack, saga: Saga) -> Shape:
    """The nodes the running stack and saga offer to faults."""
    state = stack.state
    return Shape(
        postgres=_embedded(state.postgres),
        brokers=_embedded(state.broker),
        connect_workers=_embedded(state.connect),
        spark_workers=len(nodes.spark_workers(stack)),
        replicas=saga.replicas,
        partitionable=state.network is not None,
    )


def schedule(rounds: int, rng: random.Random, kinds: Sequence[str]) -> list[str]:
    """``rounds`` faults: every kind once per cycle, each cycle in a shuffled order."""
    planned: list[str] = []
    while len(planned) < rounds:
        cycle = list(kinds)
        rng.shuffle(cycle)
        planned += cycle
    return planned[:rounds]


@dataclass
class Round:
    number: int
    fault: str
    at: float  # seconds since the campaign started
    injected: float  # seconds the fault and its repair took
    recovery: float  # seconds from the fault until the probe order was final
    probe: str  # the probe order's id
    struck: str = ""  # the node or process the fault struck (kafka-2, orders-2, ...)
    # Epoch seconds from the fault until it was over and its probe order final: the orders
    # POSTed meanwhile are the ones it struck.
    began: float = 0.0
    ended: float = 0.0


@dataclass
class Checks:
    """What the checks after a run found: every order final, the invariants, the audit."""

    by_status: dict[str, int]
    stuck: int  # orders not final when the checks gave up waiting
    lost: int  # events on the consumers' topics passed but never applied (audit)
    duplicates: int  # audit duplicates plus the saga's duplicate effects
    latencies: list[float] = field(repr=False)
    unavailable: int  # client retries (503, no connection)
    report_ok: bool
    audits: list[dict[str, Any]] = field(repr=False)
    # Why report_ok is false: each saga invariant broken (with up to five order ids), retried
    # POSTs answered with another order, consumers audited without a ledger.
    problems: list[str] = field(default_factory=list)
    # Orders cancelled by their timer, captured late anyway, and refunded (`Report.late`).
    late_captures: dict[str, int] = field(default_factory=dict)
    # What a read_committed reader saw on the saga's topics: records, and event ids seen more
    # than once (None: not scanned, the connectors being at-least-once).
    kafka_records: int = 0
    kafka_duplicates: int | None = None
    # When each order of ``latencies`` was POSTed (epoch seconds), in the same order.
    posted: list[float] = field(default_factory=list, repr=False)

    @property
    def ok(self) -> bool:
        return (
            self.report_ok
            and self.stuck == 0
            and self.lost == 0
            and self.duplicates == 0
            and not self.kafka_duplicates
            and not self.problems
        )

    def latency(self, q: float) -> float:
        """Quantile ``q`` (0.5, 0.99) of POST -> final latencies."""
        return quantile(self.latencies, q)


def quantile(samples: Sequence[float], q: float) -> float:
    """Quantile ``q`` (0.5, 0.99) of ``samples`` (0 when there are none)."""
    if len(samples) < 2:
        return samples[0] if samples else 0.0
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return cuts[min(98, max(0, round(q * 100) - 1))]


@dataclass(kw_only=True)
class Campaign(Checks):
    """What a campaign did and found."""

    rounds: list[Round]
    orders: int
    baseline: float  # the probe latency before any fault
    duration: float

    def by_fault(self) -> dict[str, dict[str, float]]:
        """Per fault kind: rounds, recovery median and max, and the orders POSTed while a
        fault of the kind lasted: how many, their POST -> final p99."""
        kinds: dict[str, list[Round]] = {}
        for r in self.rounds:
            kinds.setdefault(r.fault, []).append(r)
        found: dict[str, dict[str, float]] = {}
        for kind, rounds in sorted(kinds.items()):
            times = [r.recovery for r in rounds]
            posted = self.posted if len(self.posted) == len(self.latencies) else []
            struck = [
                latency
                for latency, at in zip(self.latencies, posted, strict=False)
                if any(r.began <= at <= r.ended for r in rounds)
            ]
            found[kind] = {
                "rounds": len(times),
                "recovery_p50": statistics.median(times),
                "recovery_max": max(times),
                "orders_during": len(struck),
                "during_p99": quantile(struck, 0.99),
            }
        return found

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("latencies")
        data.pop("posted")
        return {
            **data,
            "ok": self.ok,
            "by_fault": self.by_fault(),
            "latency_p50": self.latency(0.5),
            "latency_p99": self.latency(0.99),
        }


def probe(saga: Saga, since: float, seed: int, timeout: float = 600) -> tuple[Placed, float]:
    """Place one order (retrying while the service is down, on the next replica when it runs
    several: the first one tried changes with ``seed``) and wait until it is final; returns it
    and the seconds from ``since`` (monotonic) until then."""
    urls = saga.service_urls("orders")
    turn = seed % len(urls)
    placed = load.place_orders([*urls[turn:], *urls[:turn]], 1, seed=seed, retry_share=0.0)[0]

    def final() -> bool:
        try:
            return not load.not_final(saga.engines["orders"], [placed])
        except Exception as exc:  # the orders database restarting
            if not is_transient(exc):
                raise
            return False

    what = f"probe order {placed.order_id} to be final"
    wait_until(final, timeout=timeout, poll=0.2, what=what, error=TimeoutError)
    return placed, time.monotonic() - since


def run(
    stack: Stack,
    saga: Saga,
    *,
    rounds: int,
    orders: int,
    rate: float,
    seed: int = 1,
    gap: tuple[float, float] = (2.0, 8.0),
    kinds: Sequence[str] | None = None,
    echo: Callable[[str], None] = print,
    final_timeout: float = 900,
    supervise: bool = True,
) -> Campaign:
    """``rounds`` faults of ``kinds`` (default: every kind the stack's shape offers) while
    ``orders`` orders are placed at ``rate`` per second, then the checks. ``gap``: seconds
    between a round's recovery and the next fault. ``supervise``: run the connector
    supervisor beside the saga, as a deployment does (False: the caller runs one)."""
    with supervised(stack, echo=echo) if supervise else contextlib.nullcontext():
        return _campaign(stack, saga, rounds, orders, rate, seed, gap, kinds, echo, final_timeout)


def _campaign(
    stack: Stack,
    saga: Saga,
    rounds: int,
    orders: int,
    rate: float,
    seed: int,
    gap: tuple[float, float],
    kinds: Sequence[str] | None,
    echo: Callable[[str], None],
    final_timeout: float,
) -> Campaign:
    shape = shape_of(stack, saga)
    rng = random.Random(seed)
    plan = schedule(rounds, rng, check(kinds or offered(shape), shape))
    started = time.monotonic()
    first, baseline = probe(saga, time.monotonic(), seed=rng.randrange(1 << 30))
    probes = [first]
    echo(f"baseline: a probe order is final {baseline:.1f}s after its POST")
    load = Load(saga, orders, rate=rate, seed=seed)
    done: list[Round] = []
    for number, kind in enumerate(plan, 1):
        time.sleep(rng.uniform(*gap))
        at, began = time.monotonic(), time.time()
        echo(f"round {number}/{len(plan)}: {kind}")
        struck = inject(kind, stack, saga, rng)
        injected = time.monotonic() - at
        order, recovery = probe(saga, at, seed=rng.randrange(1 << 30))
        repaired()  # a fault that outlasts its strike (a freeze) is over
        probes.append(order)
        done.append(
            Round(
                number,
                kind,
                at - started,
                injected,
                recovery,
                order.order_id,
                struck,
                began=began,
                ended=time.time(),
            )
        )
        echo(f"round {number}/{len(plan)}: {kind} on {struck} recovered in {recovery:.1f}s")
    placed = load.join()
    checks = final_checks(saga, placed, probes, done, echo=echo, timeout=final_timeout)
    return Campaign(
        rounds=done,
        orders=len(placed) + len(probes),
        baseline=baseline,
        duration=time.monotonic() - started,
        **vars(checks),
    )


class Load:
    """``orders`` orders placed at ``rate`` per second on a thread of their own (started at
    once), with client retries, while faults strike; `join` returns them."""

    def __init__(self, saga: Saga, orders: int, *, rate: float, seed: int) -> None:
        self.placed: list[Placed] = []
        self.failure: list[BaseException] = []

        def place() -> None:
            try:
                self.placed.extend(saga.place_orders(orders, seed=seed, rate=rate))
            except BaseException as exc:  # raised by join, once the faults are done
                self.failure.append(exc)

        self.thread = threading.Thread(target=place, name="saga-load")
        self.thread.start()

    def join(self) -> list[Placed]:
        """The placed orders, once all are; raises when placing them failed."""
        self.thread.join()
        if self.failure:
            raise RuntimeError(f"placing orders failed: {self.failure[0]!r}") from self.failure[0]
        return self.placed


def final_checks(
    saga: Saga,
    placed: list[Placed],
    probes: list[Placed],
    rounds: Sequence[Round],
    *,
    echo: Callable[[str], None] = print,
    timeout: float = 900,
) -> Checks:
    """Wait until every order of a run (``placed`` and the ``probes``) is final, then check the
    saga's invariants and audit its consumers; ``rounds``: the faults the run struck."""
    everything = placed + probes
    echo(f"waiting until all {len(everything)} orders are final")
    stuck = saga.wait_final(everything, timeout=timeout)
    # An outage delays a timer as it delays any event: the bound past a timeout grows with it.
    longest = max((r.recovery for r in rounds), default=0.0)
    saga.timeout_bound = max(saga.timeout_bound, longest + 30.0)
    report: Report = saga.report(placed, warm=probes)
    audits = saga.audit()
    found = problems(report, audits)
    try:
        kafka = committed_duplicates(saga)
    except (TimeoutError, KafkaException) as exc:  # a run's figures are kept all the same
        found.append(f"read_committed scan: {exc}")
        kafka = None
    if kafka is not None and kafka.duplicate_count:
        found += [
            f"{topic}: ids read twice by a read_committed reader: {ids[:5]}"
            for topic, ids in kafka.duplicates.items()
            if ids
        ]
    return Checks(
        by_status=report.by_status,
        stuck=len(stuck),
        lost=sum(a["totals"]["lost"] for a in audits),
        duplicates=sum(a["totals"]["duplicate"] for a in audits) + sum(report.duplicates.values()),
        latencies=report.latencies,
        posted=report.posted,
        unavailable=sum(p.unavailable for p in everything),
        report_ok=report.ok and all(a["exact"] for a in audits),
        audits=audits,
        problems=found,
        late_captures=report.late,
        kafka_records=kafka.records if kafka else 0,
        kafka_duplicates=kafka.duplicate_count if kafka else None,
    )


def committed_duplicates(saga: Saga) -> Scan | None:
    """The saga's topics as a read_committed reader sees them (`kafka_scan`), on a stack whose
    connectors are exactly-once; None on an at-least-once one, whose re-sends are expected."""
    stack = saga.stack
    if not stack.settings.connect_exactly_once:
        return None
    from outboxkit_workshop.saga_harness.targets import saga_topics

    return scan(stack.kafka_client_config(), saga_topics(stack))


def problems(report: Report, audits: list[dict[str, Any]]) -> list[str]:
    """What made the saga's report or the audit fail, in words (empty when both hold)."""
    found = [f"{name}: {ids[:5]}" for name, ids in report.violations.items() if ids]
    if report.retried_same_order != report.retried_total:
        found.append(
            f"retried POSTs answered with the first order: "
            f"{report.retried_same_order} of {report.retried_total}"
        )
    final = sum(report.by_status.get(s, 0) for s in rules.FINAL)
    if final != report.orders:
        found.append(f"final orders {final} of {report.orders} ({report.by_status})")
    found += [f"no ledger for consumer {a.get('consumer')}" for a in audits if not a["exact"]]
    return found
