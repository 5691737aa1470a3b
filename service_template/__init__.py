"""FastAPI app factory for outboxkit services: settings, unit of work, idempotency keys, health,
readiness, Prometheus metrics, structured logs with trace ids, problem+json errors."""

from outbox.unit import UnitOfWork
from service_template.app import ServiceApp, create_app, service_router
from service_template.errors import Problem
from service_template.idempotency import IdempotencyKey, idempotent
from service_template.openapi import problems
from service_template.settings import ServiceSettings
from service_template.uow import unit_of_work

__all__ = [
    "IdempotencyKey",
    "Problem",
    "ServiceApp",
    "ServiceSettings",
    "UnitOfWork",
    "create_app",
    "idempotent",
    "problems",
    "service_router",
    "unit_of_work",
]
