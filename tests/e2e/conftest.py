"""The saga on the session's stack: three service databases and connectors, three services, the
Spark jobs in one driver; warmed up with one order. And the saga on the at-least-once stack."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from devstack.stack import Stack
from saga_harness.processes import Saga
from tests.otlp import OtlpReceiver


@contextlib.contextmanager
def running_saga(stack: Stack, label: str = "saga", **options: Any) -> Iterator[Saga]:
    """The saga's processes on ``stack``, warmed up, for the block; stopped after (the
    processes' log tails printed when set-up or the block fails)."""
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


@pytest.fixture(scope="session")
def otlp() -> Iterator[OtlpReceiver]:
    """An OTLP/HTTP receiver in this process, which the session saga's processes export their
    spans to (up until after the saga stopped)."""
    receiver = OtlpReceiver()
    yield receiver
    receiver.close()


@pytest.fixture(scope="session")
def saga(stack: Stack, otlp: OtlpReceiver) -> Iterator[Saga]:
    with running_saga(stack, telemetry=otlp.env()) as run:
        yield run


@pytest.fixture
def alo_saga(at_least_once_stack: Stack) -> Iterator[Saga]:
    """The saga on the at-least-once stack (topics ``alo.event.*``, Connect without exactly-once
    source), in databases of its own (alo_orders, ...): consumers reading ``outbox.event.*``
    never see its orders' events."""
    with running_saga(at_least_once_stack, "alo saga", database_prefix="alo_") as run:
        yield run
