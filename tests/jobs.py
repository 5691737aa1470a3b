"""Consumer jobs used by the Spark tests, configured through environment variables so that
subprocess runs (`outboxkit consume tests.jobs:effects_job`) can be pointed at a test's topics."""

from __future__ import annotations

import os

from sqlalchemy import Column, Integer, MetaData, String, Table
from sqlalchemy.orm import Session

from outbox.envelope import Envelope
from spark_consumers.job import Job

metadata = MetaData()
effects = Table(
    "spark_effects",
    metadata,
    Column("consumer", String, nullable=False),
    Column("event_id", String, nullable=False),
    Column("key", String, nullable=False),
    Column("n", Integer),
)


def record_effect(envelope: Envelope, session: Session) -> None:
    """The business effect: one row per applied event (duplicates would show as repeats)."""
    if envelope.payload.get("poison") and not os.environ.get("OUTBOXKIT_TEST_FIXED"):
        raise ValueError(f"poison event for {envelope.aggregate_id}")
    session.execute(
        effects.insert().values(
            consumer=os.environ["OUTBOXKIT_TEST_CONSUMER"],
            event_id=str(envelope.event_id),
            key=envelope.aggregate_id,
            n=envelope.payload.get("n"),
        )
    )


def effects_job() -> Job:
    """A job recording one effect row per event of the topics in OUTBOXKIT_TEST_TOPICS."""
    return Job(
        name=os.environ["OUTBOXKIT_TEST_CONSUMER"].replace("-", "_"),
        topics=tuple(os.environ["OUTBOXKIT_TEST_TOPICS"].split(",")),
        consumer=os.environ["OUTBOXKIT_TEST_CONSUMER"],
        handlers=record_effect,
        database_url=os.environ["OUTBOXKIT_TEST_DATABASE_URL"],
        bootstrap_servers=os.environ["OUTBOXKIT_TEST_BOOTSTRAP"],
        max_attempts=2,
        max_offsets_per_trigger=int(os.environ.get("OUTBOXKIT_TEST_MAX_OFFSETS", "50000")),
    )
