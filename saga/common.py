"""Plumbing shared by the saga's services: settings per service, migrations, consumer jobs and
the replies their handlers publish."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import Field
from pydantic_settings import SettingsConfigDict
from sqlalchemy import TableValuedAlias, bindparam, column, func
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.types import TypeEngine

from inbox import BatchHandler
from migrations.runner import Migrations
from outbox.unit import UnitOfWork
from saga.contracts import CONTRACTS
from saga.rules import Reply
from service_template import ServiceSettings
from spark_consumers.job import Job
from spark_consumers.settings import ConsumerSettings

HERE = Path(__file__).resolve().parent
SERVICES = ("orders", "payments", "shipping")


def unnested(name: str, **columns: TypeEngine[Any]) -> TableValuedAlias:
    """Rows bound as one array per column: ``unnest(:name_a, :name_b) AS name(a, b)``,
    executed with ``{"name_a": [...], "name_b": [...]}``, as `unnested_rows` builds them (the
    alias's name in each parameter's: an UPDATE may not bind the name of one of its table's
    columns). The statement is the same for any number of rows, so SQLAlchemy compiles it once;
    a VALUES list is a new statement for each number of rows, compiled on every call (with the
    multi-row INSERTs, a fifth of the CPU of the consumers' Python workers in the saga)."""
    arrays = (bindparam(_array(name, c), type_=ARRAY(kind)) for c, kind in columns.items())
    shape = (column(c, kind) for c, kind in columns.items())
    return func.unnest(*arrays).table_valued(*shape).render_derived(name=name)


def unnested_rows(rows: TableValuedAlias, values: Iterable[Sequence[Any]]) -> dict[str, list[Any]]:
    """The parameters of `unnested` ``rows`` for ``values``, one tuple per row in the order of
    its columns: each column's array under its parameter's name."""
    by_column = list(zip(*values, strict=True)) or [()] * len(rows.c)
    return {_array(rows.name, c.key): list(v) for c, v in zip(rows.c, by_column, strict=True)}


def _array(name: str, column_name: str) -> str:
    """The name of the parameter that carries one column of `unnested` ``name``."""
    return f"{name}_{column_name}"


class SagaServiceSettings(ServiceSettings, ConsumerSettings):
    """A saga service's settings: its HTTP side and its consumer job, from one environment."""

    max_offsets_per_trigger: int = Field(
        default=5_000,
        description="most Kafka records a micro-batch reads: small enough to keep a hop short "
        "under load",
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


def job_of(service: str, aggregate_types: tuple[str, ...], handlers: BatchHandler) -> Job:
    """The consumer job of ``service``: the topics of ``aggregate_types`` under the configured
    prefix, into the service's database, publishing through the service's outbox."""
    settings = settings_of(service)
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
