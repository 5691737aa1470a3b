"""What a consumer gives the inbox to apply events with: a handler per event (one function, or
one per event type), or a `BatchHandler` that applies a partition's slice set-wise."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from outbox.unit import UnitOfWork
from outboxkit.kernel.envelope import Envelope

# A handler applies one event in the inbox's transaction through the unit of work it is given:
# business writes on ``uow.session``, follow-up events with ``uow.publish``.
Handler = Callable[[Envelope, UnitOfWork], None]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchHandler:
    """Applies a partition's slice set-wise: ``apply(events, uow)`` gets every event the inbox
    decided to apply, in offset order, and the unit of work of the partition's transaction.

    It writes with a few set-wise statements (``executemany``, multi-row VALUES, COPY) instead
    of one per event, and publishes the next events with ``uow.publish_many`` (``caused_by``
    carries each consumed event's trace on). It must keep per-key order itself: events of one
    key arrive in the order they were published. When it raises, the inbox rolls the slice back
    and applies the events one by one (``apply([event], uow)``), so the failing event is retried,
    then parked, and only its key waits.

    Attributes:
        apply: ``apply(events, uow)``, as above.
        event_types: The event types it applies (others are parked as unknown); None: every
            type.
        validate: Why an event's payload must not be applied, None when it may (pure: no I/O).
            An event it rejects is parked with that reason before ``apply`` sees it, not
            retried. None: no check.
    """

    apply: Callable[[Sequence[Envelope], UnitOfWork], None]
    event_types: frozenset[str] | None = None
    validate: Callable[[Envelope], str | None] | None = None

    def handles(self, event_type: str) -> bool:
        """True when ``event_type`` is applied by this handler.

        Args:
            event_type: An event's type.
        """
        return self.event_types is None or event_type in self.event_types

    def invalid(self, event: Envelope) -> str | None:
        """Why ``event`` must not be applied (``validate`` rejected it), else None.

        Args:
            event: A consumed event of a type this handler applies.
        """
        if self.validate is None or not self.handles(event.event_type):
            return None
        try:
            return self.validate(event)
        except Exception as exc:  # a check crashing on a payload rejects it: parked, not lost
            log.warning("the payload check of event %s failed", event.event_id, exc_info=True)
            return f"the payload check failed: {type(exc).__name__}: {exc}"


Handlers = Mapping[str, Handler] | Handler | BatchHandler


def as_batch(handlers: Handlers) -> BatchHandler:
    """The one-event API as a batch handler: each event through its handler, in offset order,
    with a unit of work whose span continues the event's trace.

    Args:
        handlers: One ``handler(event, uow)`` for every type, a mapping of event type to
            handler (other types are parked as unknown), or a `BatchHandler` (returned as is).
    """
    if isinstance(handlers, BatchHandler):
        return handlers
    if callable(handlers):
        single = handlers

        def each(events: Sequence[Envelope], uow: UnitOfWork) -> None:
            for event in events:
                single(event, uow.for_event(event))

        return BatchHandler(each)
    by_type = dict(handlers)

    def each_by_type(events: Sequence[Envelope], uow: UnitOfWork) -> None:
        for event in events:
            by_type[event.event_type](event, uow.for_event(event))

    return BatchHandler(each_by_type, frozenset(by_type))
