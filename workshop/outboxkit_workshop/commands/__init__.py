"""`outboxkit dev ...`: the workshop's commands, added to the `outboxkit` command line through
the ``outboxkit.commands`` entry point."""

from __future__ import annotations

from typing import Any


def stack_settings() -> type[Any]:
    """The settings the dev commands read (imported when a command runs, not when parsed)."""
    from outboxkit_workshop.devstack.settings import StackSettings

    return StackSettings
