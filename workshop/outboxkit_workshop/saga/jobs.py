"""The saga's Spark consumer jobs (`outboxkit consume outboxkit_workshop.saga.jobs:payments ...`).

Each reads its settings from the service's environment
(`outboxkit_workshop.saga.common.settings_of`):
database, Kafka, topic prefix, whether the source is exactly-once, its outbox."""

from __future__ import annotations

from outboxkit_workshop.saga import orders as orders_service
from outboxkit_workshop.saga import payments as payments_service
from outboxkit_workshop.saga import rules
from outboxkit_workshop.saga import shipping as shipping_service
from outboxkit_workshop.saga.common import job_of
from spark_consumers.job import Job


def payments() -> Job:
    return job_of("payments", rules.READS["payments"], payments_service.handlers)


def shipping() -> Job:
    return job_of("shipping", rules.READS["shipping"], shipping_service.HANDLERS)


def orders() -> Job:
    return job_of("orders", rules.READS["orders"], orders_service.handlers)


ALL = (
    "outboxkit_workshop.saga.jobs:payments",
    "outboxkit_workshop.saga.jobs:shipping",
    "outboxkit_workshop.saga.jobs:orders",
)
