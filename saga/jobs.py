"""The saga's Spark consumer jobs (`outboxkit consume saga.jobs:payments ...`).

Each reads its settings from the service's environment (`saga.common.settings_of`): database,
Kafka, topic prefix, whether the source is exactly-once, its outbox."""

from __future__ import annotations

from saga import orders as orders_service
from saga import payments as payments_service
from saga import rules
from saga import shipping as shipping_service
from saga.common import job_of
from spark_consumers.job import Job


def payments() -> Job:
    return job_of("payments", (rules.ORDER, rules.SHIPMENT), payments_service.HANDLERS)


def shipping() -> Job:
    return job_of("shipping", (rules.PAYMENT,), shipping_service.HANDLERS)


def orders() -> Job:
    return job_of("orders", (rules.PAYMENT, rules.SHIPMENT), orders_service.HANDLERS)


ALL = ("saga.jobs:payments", "saga.jobs:shipping", "saga.jobs:orders")
