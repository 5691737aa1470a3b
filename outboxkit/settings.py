"""The one settings object of an outboxkit process (environment prefix ``OUTBOXKIT_``): the
stack's settings plus what the application layer adds."""

from __future__ import annotations

from devstack.settings import StackSettings


class Settings(StackSettings):
    """Everything the `outboxkit` commands read, composed from the layers below."""
