"""FastAPI app factory for outboxkit services: settings, unit of work, idempotency keys, health,
readiness, Prometheus metrics, structured logs with trace ids, problem+json errors."""

from outbox.unit import UnitOfWork
from service_template.app import ServiceApp, create_app
from service_template.errors import Problem
from service_template.settings import ServiceSettings
from service_template.uow import idempotent, unit_of_work

__all__ = [
    "Problem",
    "ServiceApp",
    "ServiceSettings",
    "UnitOfWork",
    "create_app",
    "idempotent",
    "unit_of_work",
]
