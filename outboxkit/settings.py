"""The one settings object of an outboxkit process (environment prefix ``OUTBOXKIT_``): the
stack's settings plus what the application layer adds."""

from __future__ import annotations

from pydantic import Field

from devstack.settings import StackSettings


class Settings(StackSettings):
    """Everything the `outboxkit` commands read, composed from the layers below."""

    consumer_metrics_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description="`outboxkit consume` serves Prometheus metrics on this port (0: a free "
        "port, logged); unset: no metrics endpoint. --metrics-port overrides it",
    )
    consumer_metrics_host: str = Field(
        default="127.0.0.1",
        description="the address the consumer driver's metrics listen on (0.0.0.0 in a "
        "container). --metrics-host overrides it",
    )
