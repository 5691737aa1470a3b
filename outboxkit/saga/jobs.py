"""The saga's Spark consumer jobs (`outboxkit consume outboxkit.saga.jobs:payments ...`).

Each reads its settings from the service's environment (`outboxkit.saga.common.settings_of`):
database, Kafka, topic prefix, whether the source is exactly-once, its outbox."""

from __future__ import annotations

from outboxkit.saga import orders as orders_service
from outboxkit.saga import payments as payments_service
from outboxkit.saga import rules
from outboxkit.saga import shipping as shipping_service
from outboxkit.saga.common import job_of
from spark_consumers.job import Job


def payments() -> Job:
    return job_of("payments", rules.READS["payments"], payments_service.handlers)


def shipping() -> Job:
    return job_of("shipping", rules.READS["shipping"], shipping_service.HANDLERS)


def orders() -> Job:
    return job_of("orders", rules.READS["orders"], orders_service.handlers)


ALL = ("outboxkit.saga.jobs:payments", "outboxkit.saga.jobs:shipping", "outboxkit.saga.jobs:orders")
