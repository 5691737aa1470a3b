"""The settings of the operator commands (environment prefix ``OUTBOXKIT_``): the pipeline's
endpoints and the outbox connector, as a deployment gives them, plus what the commands add. The
local dev stack's settings (`outboxkit_workshop.devstack.settings.StackSettings`) are the stack
commands'
own; these do not inherit them."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from cdc.settings import CdcSettings


class Settings(CdcSettings):
    """What `outboxkit db|outbox|cdc|inbox|consume|audit` read."""

    spark_jars: list[Path] = Field(
        default_factory=list,
        description="jars `outboxkit consume` hands Spark (its Kafka connector and dependencies); "
        "empty: those of the local stack's cache, if `outboxkit dev stack install` put them there, "
        "else none (a cluster's classpath or spark-submit provides them)",
    )
    cache_dir: Path | None = Field(
        default=None,
        description="the local stack's download cache, for the jars' fallback "
        "(default ~/.cache/outboxkit)",
    )
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
