"""The saga on the session's stack: three service databases and connectors, three services, the
Spark jobs in one driver; warmed up with one order."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from saga.run import Saga


@pytest.fixture(scope="session")
def saga(stack) -> Iterator[Saga]:
    run = Saga(stack, stack.dir / "saga", echo=lambda line: print(f"[saga] {line}"))
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
