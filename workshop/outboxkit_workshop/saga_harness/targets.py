"""What the saga's faults aim at: its services, topics and connectors, and a choice among
several targets (light to import: `outboxkit dev chaos --help` reaches it)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar

from outboxkit_workshop.devstack.processes import StackError
from outboxkit_workshop.saga import rules

if TYPE_CHECKING:
    from outboxkit_workshop.devstack.stack import Stack
    from outboxkit_workshop.saga_harness.processes import Saga

T = TypeVar("T")

# The saga's services (outboxkit_workshop.saga.common.SERVICES, whose module is too heavy to import
# for a
# CLI's help; a unit test keeps the two equal).
SERVICES = ("orders", "payments", "shipping")


def pick(choices: Sequence[T], rng: random.Random) -> T:
    """One of ``choices`` at random; the only one without drawing, so that a seed plans the
    same campaign on one replica (one node) as it did before there could be several."""
    return rng.choice(choices) if len(choices) > 1 else choices[0]


def saga_topics(stack: Stack) -> list[str]:
    """The topics the saga's outboxes publish to."""
    from outboxkit.kernel.wire.record import topic_for

    prefix = stack.settings.topic_prefix
    return [topic_for(t, topic_prefix=prefix) for t in rules.AGGREGATES]


def saga_connectors(stack: Stack, saga: Saga) -> list[str]:
    """The connectors of the saga's service databases (the stack's own connector captures the
    stack's database, where no saga service writes: it carries no saga topic)."""
    base = stack.settings.connector_name
    wanted = [f"{base}-{saga.database_prefix}{service}" for service in SERVICES]
    found = [name for name in wanted if name in stack.state.connectors]
    if not found:
        raise StackError(f"none of the saga's connectors {wanted} is registered: saga prepare")
    return found
