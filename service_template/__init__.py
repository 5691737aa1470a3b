"""FastAPI app factory for outboxkit services: settings, unit of work, idempotency keys, health,
readiness, Prometheus metrics, structured logs with trace ids, problem+json errors."""

import outboxkit.kernel  # noqa: F401  (first: it refuses packages shadowing the framework's)
from outbox.aio import AsyncUnitOfWork
from outbox.unit import UnitOfWork
from service_template.app import ServiceApp, async_service_router, create_app, service_router
from service_template.async_uow import async_unit_of_work
from service_template.errors import Problem
from service_template.idempotency import IdempotencyKey, idempotent, idempotent_async
from service_template.openapi import problems
from service_template.settings import ServiceSettings
from service_template.uow import unit_of_work

__all__ = [
    "AsyncUnitOfWork",
    "IdempotencyKey",
    "Problem",
    "ServiceApp",
    "ServiceSettings",
    "UnitOfWork",
    "async_service_router",
    "async_unit_of_work",
    "create_app",
    "idempotent",
    "idempotent_async",
    "problems",
    "service_router",
    "unit_of_work",
]
