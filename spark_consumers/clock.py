"""Time spent in a job's handlers, measured on the executor around the batch handler."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

from inbox.handlers import BatchHandler
from outbox.unit import UnitOfWork
from outboxkit.kernel.envelope import Envelope


@dataclasses.dataclass
class HandlerClock:
    """Seconds spent in a batch handler's ``apply``, failed and retried runs included."""

    seconds: float = 0.0

    def around(self, handler: BatchHandler) -> BatchHandler:
        """``handler`` with every ``apply`` timed into this clock."""

        def timed(events: Sequence[Envelope], uow: UnitOfWork) -> None:
            started = time.perf_counter()
            try:
                handler.apply(events, uow)
            finally:
                self.seconds += time.perf_counter() - started

        return dataclasses.replace(handler, apply=timed)
