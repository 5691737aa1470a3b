"""Consumer jobs used by the Spark tests. `effects_job` reads its topics and databases from
environment variables when it is loaded, so subprocess runs (`outboxkit consume
tests.jobs:effects_job`) can be pointed at one test's topics."""

from __future__ import annotations

import functools
import os

from sqlalchemy import BigInteger, Column, Identity, Integer, MetaData, String, Table

from outbox.unit import UnitOfWork
from outboxkit.kernel.envelope import Envelope
from spark_consumers.job import Job

metadata = MetaData()
effects = Table(
    "spark_effects",
    metadata,
    Column("consumer", String, nullable=False),
    Column("event_id", String, nullable=False),
    Column("key", String, nullable=False),
    Column("n", Integer),
    # Application order: a heap scan's row order is not insertion order once space is reused.
    Column("seq", BigInteger, Identity(), primary_key=True),
)


def record_effect(
    consumer: str, envelope: Envelope, uow: UnitOfWork, *, allow_poison: bool = False
) -> None:
    """The business effect: one row per applied event (a duplicate would show as a repeat)."""
    if envelope.payload.get("poison") and not allow_poison:
        raise ValueError(f"poison event for {envelope.aggregate_id}")
    uow.session.execute(
        effects.insert().values(
            consumer=consumer,
            event_id=str(envelope.event_id),
            key=envelope.aggregate_id,
            n=envelope.payload.get("n"),
        )
    )


def make_job(
    consumer: str, topics: list[str], database_url: str, bootstrap: str, **extra: object
) -> Job:
    """A job recording one effect row per event."""
    return Job(
        name=consumer.replace("-", "_"),
        topics=tuple(topics),
        consumer=consumer,
        handlers=functools.partial(record_effect, consumer),
        database_url=database_url,
        bootstrap_servers=bootstrap,
        max_attempts=2,
        **extra,  # type: ignore[arg-type]
    )


def effects_job() -> Job:
    """The job named by OUTBOXKIT_TEST_* variables, for subprocess runs."""
    return make_job(
        os.environ["OUTBOXKIT_TEST_CONSUMER"],
        os.environ["OUTBOXKIT_TEST_TOPICS"].split(","),
        os.environ["OUTBOXKIT_TEST_DATABASE_URL"],
        os.environ["OUTBOXKIT_TEST_BOOTSTRAP"],
        max_offsets_per_trigger=int(os.environ.get("OUTBOXKIT_TEST_MAX_OFFSETS", "50000")),
        batch_retry_seconds=float(os.environ.get("OUTBOXKIT_TEST_BATCH_RETRY_SECONDS", "300")),
        ledger=os.environ.get("OUTBOXKIT_TEST_LEDGER") == "1",
    )
