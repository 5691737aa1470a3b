"""The saga on the session's stack: three service databases and connectors, three services, the
Spark jobs in one driver; warmed up with one order. Started for this folder's tests and stopped
after them, its connectors deleted and their slots dropped: an idle saga would take CPU from
every later test, and its connectors' tasks would restart with every Connect restart of a fault
test. And the saga on the at-least-once stack, whose test runs first in this folder."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from outboxkit_workshop.devstack.stack import Stack
from outboxkit_workshop.saga_harness.processes import Saga
from tests.conftest import remove_added_connectors
from tests.otlp import OtlpReceiver


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The at-least-once saga's tests first in this folder, before the session saga starts:
    two sagas at once (two Spark drivers) would compete for the machine."""
    places = [n for n, item in enumerate(items) if "/tests/e2e/" in item.path.as_posix()]
    block = [items[n] for n in places]
    alo = [item for item in block if "alo_saga" in getattr(item, "fixturenames", ())]
    for n, item in zip(places, alo + [i for i in block if i not in alo], strict=True):
        items[n] = item


@contextlib.contextmanager
def running_saga(stack: Stack, label: str = "saga", **options: Any) -> Iterator[Saga]:
    """The saga's processes on ``stack``, warmed up, for the block; stopped after and its
    connectors deleted (the processes' log tails printed when set-up or the block fails)."""
    run = Saga(stack, stack.dir / "saga", echo=lambda line: print(f"[{label}] {line}"), **options)
    try:
        run.prepare()
        run.start_services()
        run.start_consumers()
        run.warm_up()
        yield run
    except Exception:
        print(run.logs_tail())
        raise
    finally:
        run.stop()
        remove_added_connectors(stack)


@pytest.fixture(scope="package")
def otlp() -> Iterator[OtlpReceiver]:
    """An OTLP/HTTP receiver in this process, which the package saga's processes export their
    spans to (up until after the saga stopped)."""
    receiver = OtlpReceiver()
    yield receiver
    receiver.close()


@pytest.fixture(scope="package")
def saga(stack: Stack, otlp: OtlpReceiver) -> Iterator[Saga]:
    # Orders not paid within 30 s are cancelled, as in the demo; a `slow-` customer's payment
    # answers after 35 s (tests that want late captures give the load a share of them:
    # `saga.slow_share`). A fault's delay past the timeout cancels an order too, a final state
    # the invariants accept; their bound past a timeout grows with the faults' recovery.
    timing = {"payment_timeout": 30.0, "slow_gateway": 35.0}
    with running_saga(stack, telemetry=otlp.env(), **timing) as run:
        yield run


@pytest.fixture
def alo_saga(at_least_once_stack: Stack) -> Iterator[Saga]:
    """The saga on the at-least-once stack (topics ``alo.event.*``, Connect without exactly-once
    source), in databases of its own (alo_orders, ...): consumers reading ``outbox.event.*``
    never see its orders' events."""
    with running_saga(at_least_once_stack, "alo saga", database_prefix="alo_") as run:
        yield run
