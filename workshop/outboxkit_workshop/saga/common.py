"""Plumbing shared by the saga's services: settings per service, migrations, consumer jobs and
the replies their handlers publish."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from inbox import BatchHandler
from migrations.runner import Migrations
from outbox.unit import UnitOfWork
from outboxkit_workshop.saga.contracts import CONTRACTS
from outboxkit_workshop.saga.rules import Reply
from service_template import ServiceSettings
from spark_consumers.job import Job
from spark_consumers.settings import ConsumerSettings

HERE = Path(__file__).resolve().parent
SERVICES = ("orders", "payments", "shipping")


class SagaServiceSettings(ServiceSettings, ConsumerSettings):
    """A saga service's settings: its HTTP side and its consumer job, from one environment."""

    max_offsets_per_trigger: int = Field(
        default=5_000,
        description="most Kafka records a micro-batch reads: small enough to keep a hop short "
        "under load",
    )
    payment_timeout_seconds: float = Field(
        default=120.0,
        gt=0,
        description="orders: an order not paid this long after it was placed is cancelled "
        "(a capture arriving later is refunded)",
    )
    slow_gateway_seconds: float = Field(
        default=0.0,
        ge=0,
        description="payments: the card gateway of `slow-` customers answers this long after "
        "the order was placed (until then their capture is retried later); 0: at once. The "
        "demo holds payments back past the payment timeout with it",
    )
    http_routes: Literal["async", "sync"] = Field(
        default="async",
        description="orders: its routes as async def on an AsyncSession (the saga's default) or "
        "synchronous on a Session; the service benchmark measures both side by side",
    )
    shipping_timeout_seconds: float = Field(
        default=120.0,
        gt=0,
        description="orders: a paid order not shipped this long after its capture was applied "
        "is cancelled (its payment refunded, a shipment scheduled later cancelled)",
    )


def migrations_of(service: str) -> Migrations:
    """The service's own Alembic chain (its business tables), next to the framework's."""
    return Migrations(HERE / "migrations" / service, f"{service}_alembic_version")


def settings_of(service: str) -> SagaServiceSettings:
    """Settings from ``<SERVICE>_DATABASE_URL``, ``<SERVICE>_KAFKA_BOOTSTRAP_SERVERS``,
    ``<SERVICE>_TOPIC_PREFIX``, ``<SERVICE>_EXACTLY_ONCE_SOURCE``, ``<SERVICE>_OUTBOX__MODE``
    etc. (e.g. ORDERS_DATABASE_URL)."""

    class Settings(SagaServiceSettings):
        model_config = SettingsConfigDict(
            env_prefix=f"{service.upper()}_", env_nested_delimiter="__", extra="ignore"
        )

    return Settings(name=service, consumers=[service])  # type: ignore[call-arg]


def job_of(
    service: str,
    aggregate_types: tuple[str, ...],
    handlers: BatchHandler | Callable[[SagaServiceSettings], BatchHandler],
) -> Job:
    """The consumer job of ``service``: the topics of ``aggregate_types`` under the configured
    prefix, into the service's database, publishing through the service's outbox; ``handlers``
    as they are, or made from the service's settings."""
    settings = settings_of(service)
    if not isinstance(handlers, BatchHandler):
        handlers = handlers(settings)
    if not settings.kafka_bootstrap_servers:
        raise ValueError(f"{service.upper()}_KAFKA_BOOTSTRAP_SERVERS is not set")
    return Job(
        name=f"saga_{service}",
        topics=settings.topics(*aggregate_types),
        consumer=service,
        # Job.handlers is typed without BatchHandler, which Inbox takes (inbox.apply.Handlers).
        handlers=handlers,
        database_url=settings.database_url,
        database_password_file=(
            str(settings.database_password_file) if settings.database_password_file else None
        ),
        bootstrap_servers=settings.kafka_bootstrap_servers,
        kafka_security=settings.kafka_security.resolve(),
        outbox=settings.outbox.build(),
        **settings.job_options(),
    )


def publish_replies(uow: UnitOfWork, replies: Sequence[Reply]) -> None:
    """Publish a step's replies in one statement, each validated against its contract and
    continuing the trace of its cause."""
    models = CONTRACTS.models
    uow.publish_many(
        [
            models[r.event_type].model_validate(r.payload).new_event(caused_by=r.cause)
            for r in replies
        ]
    )
