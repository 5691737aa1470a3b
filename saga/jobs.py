"""The saga's Spark consumer jobs (`outboxkit consume saga.jobs:payments ...`).

Each reads its database from ``<SERVICE>_DATABASE_URL`` and Kafka from
``SAGA_KAFKA_BOOTSTRAP_SERVERS``."""

from __future__ import annotations

import os

from cdc.config import topic_for as topic
from saga import orders as orders_service
from saga import payments as payments_service
from saga import rules
from saga import shipping as shipping_service
from spark_consumers.job import Job


def _job(service: str, topics: tuple[str, ...], handlers: dict) -> Job:  # type: ignore[type-arg]
    return Job(
        name=f"saga_{service}",
        topics=topics,
        consumer=service,
        handlers=handlers,
        database_url=os.environ[f"{service.upper()}_DATABASE_URL"],
        bootstrap_servers=os.environ["SAGA_KAFKA_BOOTSTRAP_SERVERS"],
        max_offsets_per_trigger=int(os.environ.get("SAGA_MAX_OFFSETS_PER_TRIGGER", "5000")),
        # Debezium on an exactly-once Connect worker (the local stack's default).
        exactly_once_source=os.environ.get("SAGA_EXACTLY_ONCE_SOURCE", "true") == "true",
    )


def payments() -> Job:
    return _job("payments", (topic(rules.ORDER), topic(rules.SHIPMENT)), payments_service.HANDLERS)


def shipping() -> Job:
    return _job("shipping", (topic(rules.PAYMENT),), shipping_service.HANDLERS)


def orders() -> Job:
    return _job("orders", (topic(rules.PAYMENT), topic(rules.SHIPMENT)), orders_service.HANDLERS)


ALL = ("saga.jobs:payments", "saga.jobs:shipping", "saga.jobs:orders")
