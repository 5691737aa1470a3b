"""Inbox handlers that get typed events: each event decoded into its contract
(`outbox.contracts`) before the handler runs, and one that does not decode parked with why."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from inbox.handlers import BatchHandler
from outbox.contracts import Contracts, Received
from outbox.unit import UnitOfWork
from outboxkit.kernel.envelope import Envelope


def typed_batch(
    contracts: Contracts,
    apply: Callable[[Sequence[Received[Any]], UnitOfWork], None],
    event_types: Iterable[str] | None = None,
) -> BatchHandler:
    """A `BatchHandler` of the contracts' event types (or ``event_types``): ``apply(received,
    uow)`` gets each event with its payload decoded (upcast to the current version); an event
    that does not decode is parked with the reason before ``apply`` runs, not retried.

    Args:
        contracts: The event types' models and upcasters.
        apply: ``apply(received, uow)``: the slice's decoded events, in offset order, and the
            unit of work of the partition's transaction.
        event_types: The event types it applies; None: every type of ``contracts``.
    """

    def decoded(events: Sequence[Envelope], uow: UnitOfWork) -> None:
        apply([Received(e, contracts.decode(e)) for e in events], uow)

    types = frozenset(event_types) if event_types is not None else contracts.event_types
    return BatchHandler(decoded, types, contracts.problem)


def typed_handler(
    contracts: Contracts, apply: Callable[[Received[Any], UnitOfWork], None]
) -> BatchHandler:
    """The one-event form: ``apply(received, uow)`` once per event, in offset order, each in the
    unit of work of its own event (its span continues the event's trace).

    Args:
        contracts: The event types' models and upcasters; it applies their types.
        apply: ``apply(received, uow)`` for one decoded event.
    """

    def each(events: Sequence[Envelope], uow: UnitOfWork) -> None:
        for event in events:
            apply(Received(event, contracts.decode(event)), uow.for_event(event))

    return BatchHandler(each, contracts.event_types, contracts.problem)
