"""A fault campaign on the running saga (`outboxkit chaos`): randomized rounds of every fault
an operator meets, while orders flow at a steady rate with client retries; then every order
final, the saga's invariants, and the audit of its consumers.

Faults, one per round, each kind in turn in a shuffled order:

- ``spark-kill``, ``orders-kill``, ``payments-kill``, ``shipping-kill``, ``connect-kill``:
  kill -9 of the consumer driver, a service or the Connect worker; after a pause the campaign
  starts it again, as a process supervisor (systemd, Kubernetes) would: nothing else is touched;
- ``postgres-crash``: immediate shutdown of Postgres (every service's database), started again
  after a few seconds;
- ``broker-restart``: the Kafka broker stopped and started again on its data;
- ``connect-task-restart``: every connector and task restarted through Connect's REST API.

No consumer is restarted for the last three: the consumers and services ride them out. Each
round's recovery time is from the fault until a probe order, placed as soon as the fault was
injected, reaches a final state (the saga's ordinary latency included; the baseline probe before
the first round measures it).
"""

from __future__ import annotations

import random
import signal
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from devstack.processes import stop
from devstack.stack import Stack
from outbox.errors import is_transient
from saga import load, rules
from saga.common import SERVICES
from saga.invariants import Report
from saga.load import Placed
from saga.processes import Saga


def crash_postgres(stack: Stack) -> None:
    """Immediate shutdown of the stack's Postgres (no checkpoint: crash recovery on start), and
    after a few seconds the database starts again on its port and data."""
    pid = stack.state.postgres.pid
    assert pid is not None
    stop(pid, sig=signal.SIGQUIT, timeout=30)
    time.sleep(6)
    stack.up()  # starts only what is not running: the database


def restart_broker(stack: Stack) -> None:
    """The Kafka broker stopped (SIGTERM, a rolling restart's step) and started again on its
    port and log after a few seconds."""
    pid = stack.state.broker.pid
    assert pid is not None
    stop(pid)
    time.sleep(4)
    stack.up()  # starts only what is not running: the broker


def restart_connect_tasks(stack: Stack) -> None:
    """Every connector and its tasks restarted through Connect's REST API, as an operator or a
    rebalance does."""
    client = stack.connect_client()
    for name in stack.state.connectors:
        client.restart(name, include_tasks=True)


def kill_connect(stack: Stack, pause: float) -> None:
    """kill -9 of the Connect worker; started again (on its REST port) after ``pause``."""
    pid = stack.state.connect.pid
    assert pid is not None
    stop(pid, sig=signal.SIGKILL, timeout=30)
    time.sleep(pause)
    stack.up()


def kill_process(saga: Saga, name: str, pause: float) -> None:
    """kill -9 of a saga process; started again (a service on its port) after ``pause``."""
    saga.kill(name)
    time.sleep(pause)
    saga.start([name])


ROUTINE: dict[str, Callable[[Stack], None]] = {
    "postgres-crash": crash_postgres,
    "broker-restart": restart_broker,
    "connect-task-restart": restart_connect_tasks,
}
KILLS = ("spark-kill", "connect-kill", *(f"{s}-kill" for s in SERVICES))
KINDS = (*KILLS, *ROUTINE)


def inject(kind: str, stack: Stack, saga: Saga, rng: random.Random) -> None:
    """One fault of ``kind`` (see the module's docstring), repaired as production would."""
    if kind in ROUTINE:
        ROUTINE[kind](stack)
    elif kind == "connect-kill":
        kill_connect(stack, rng.uniform(1, 3))
    elif kind == "spark-kill":
        kill_process(saga, "consumers", rng.uniform(1, 3))
    elif kind.endswith("-kill") and kind.removesuffix("-kill") in SERVICES:
        kill_process(saga, kind.removesuffix("-kill"), rng.uniform(1, 3))
    else:
        raise ValueError(f"unknown fault {kind!r}: choose from {KINDS}")


def schedule(rounds: int, rng: random.Random, kinds: tuple[str, ...] = KINDS) -> list[str]:
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


@dataclass
class Campaign:
    """What a campaign did and found."""

    rounds: list[Round]
    orders: int
    baseline: float  # the probe latency before any fault
    duration: float
    by_status: dict[str, int]
    stuck: int  # orders not final when the campaign gave up waiting
    lost: int  # events on the consumers' topics passed but never applied (audit)
    duplicates: int  # audit duplicates plus the saga's duplicate effects
    latencies: list[float] = field(repr=False)
    unavailable: int  # client retries (503, no connection)
    report_ok: bool
    audits: list[dict[str, Any]] = field(repr=False)
    # Why report_ok is false: each saga invariant broken (with up to five order ids), retried
    # POSTs answered with another order, consumers audited without a ledger.
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.report_ok and self.stuck == 0 and self.lost == 0 and self.duplicates == 0

    def by_fault(self) -> dict[str, dict[str, float]]:
        """Per fault kind: rounds, recovery median and max."""
        kinds: dict[str, list[float]] = {}
        for r in self.rounds:
            kinds.setdefault(r.fault, []).append(r.recovery)
        return {
            kind: {
                "rounds": len(times),
                "recovery_p50": statistics.median(times),
                "recovery_max": max(times),
            }
            for kind, times in sorted(kinds.items())
        }

    def latency(self, q: float) -> float:
        """Quantile ``q`` (0.5, 0.99) of POST -> final latencies."""
        if len(self.latencies) < 2:
            return self.latencies[0] if self.latencies else 0.0
        cuts = statistics.quantiles(self.latencies, n=100, method="inclusive")
        return cuts[min(98, max(0, round(q * 100) - 1))]

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("latencies")
        return {
            **data,
            "ok": self.ok,
            "by_fault": self.by_fault(),
            "latency_p50": self.latency(0.5),
            "latency_p99": self.latency(0.99),
        }


def probe(saga: Saga, since: float, seed: int, timeout: float = 600) -> tuple[Placed, float]:
    """Place one order (retrying while the service is down) and wait until it is final;
    returns it and the seconds from ``since`` (monotonic) until then."""
    placed = load.place_orders(saga.urls["orders"], 1, seed=seed, retry_share=0.0)[0]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if not load.not_final(saga.engines["orders"], [placed]):
                return placed, time.monotonic() - since
        except Exception as exc:  # the orders database restarting
            if not is_transient(exc):
                raise
        time.sleep(0.2)
    raise TimeoutError(f"probe order {placed.order_id} not final after {timeout:.0f}s")


def run(
    stack: Stack,
    saga: Saga,
    *,
    rounds: int,
    orders: int,
    rate: float,
    seed: int = 1,
    gap: tuple[float, float] = (2.0, 8.0),
    kinds: tuple[str, ...] = KINDS,
    echo: Callable[[str], None] = print,
    final_timeout: float = 900,
) -> Campaign:
    """``rounds`` faults while ``orders`` orders are placed at ``rate`` per second, then the
    checks. ``gap``: seconds between a round's recovery and the next fault."""
    rng = random.Random(seed)
    plan = schedule(rounds, rng, kinds)
    placed: list[Placed] = []
    failure: list[BaseException] = []

    def place() -> None:
        try:
            placed.extend(saga.place_orders(orders, seed=seed, rate=rate))
        except BaseException as exc:  # reported after the rounds
            failure.append(exc)

    started = time.monotonic()
    first, baseline = probe(saga, time.monotonic(), seed=rng.randrange(1 << 30))
    probes = [first]
    echo(f"baseline: a probe order is final {baseline:.1f}s after its POST")
    loader = threading.Thread(target=place, name="chaos-load")
    loader.start()
    done: list[Round] = []
    for number, kind in enumerate(plan, 1):
        time.sleep(rng.uniform(*gap))
        at = time.monotonic()
        echo(f"round {number}/{len(plan)}: {kind}")
        inject(kind, stack, saga, rng)
        injected = time.monotonic() - at
        order, recovery = probe(saga, at, seed=rng.randrange(1 << 30))
        probes.append(order)
        done.append(Round(number, kind, at - started, injected, recovery, order.order_id))
        echo(f"round {number}/{len(plan)}: {kind} recovered in {recovery:.1f}s")
    loader.join()
    if failure:
        raise RuntimeError(f"placing orders failed: {failure[0]!r}") from failure[0]
    everything = placed + probes
    echo(f"waiting until all {len(everything)} orders are final")
    stuck = saga.wait_final(everything, timeout=final_timeout)
    report: Report = saga.report(placed, warm=probes)
    audits = saga.audit()
    return Campaign(
        rounds=done,
        orders=len(everything),
        baseline=baseline,
        duration=time.monotonic() - started,
        by_status=report.by_status,
        stuck=len(stuck),
        lost=sum(a["totals"]["lost"] for a in audits),
        duplicates=sum(a["totals"]["duplicate"] for a in audits) + sum(report.duplicates.values()),
        latencies=report.latencies,
        unavailable=sum(p.unavailable for p in everything),
        report_ok=report.ok and all(a["exact"] for a in audits),
        audits=audits,
        problems=problems(report, audits),
    )


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
