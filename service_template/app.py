"""The app factory: `create_app(settings, routers=[...])` gives a service its plumbing."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine
from starlette.concurrency import run_in_threadpool

from migrations.runner import FRAMEWORK, Migrations
from outbox.envelope import TRACEPARENT
from outbox.publish import Outbox
from outbox.trace import TraceContext
from service_template import errors, logs
from service_template.metrics import Metrics
from service_template.settings import ServiceSettings
from service_template.uow import UnitOfWorkRoute

log = logging.getLogger("service")


def service_router(**kwargs: Any) -> APIRouter:
    """A router whose routes run in a unit of work (use `Depends(unit_of_work)` in them)."""
    return APIRouter(route_class=UnitOfWorkRoute, **kwargs)


@dataclass
class ServiceApp:
    """What the routes and the framework share: settings, engine, outbox, metrics, migrations."""

    settings: ServiceSettings
    engine: Engine
    metrics: Metrics
    migrations: Sequence[Migrations] = field(default_factory=tuple)
    outbox: Outbox = field(init=False)  # the one the settings describe

    def __post_init__(self) -> None:
        self.outbox = self.settings.outbox.build()

    def readiness(self) -> list[str]:
        """Problems that make the service not ready (empty when ready)."""
        try:
            with self.engine.connect() as conn:
                conn.execute(text("SELECT 1"))
        except Exception as exc:
            return [f"database unreachable: {str(exc).splitlines()[0]}"]
        url = self.engine.url.render_as_string(hide_password=False)
        problems = []
        for migrations in (FRAMEWORK, *self.migrations):
            current, head = migrations.current(url), migrations.head()
            if current != head:
                problems.append(f"{migrations.version_table} at {current}, head is {head}")
        return problems


def create_app(
    settings: ServiceSettings,
    *,
    routers: Sequence[APIRouter] = (),
    migrations: Sequence[Migrations] = (),
    title: str | None = None,
    description: str = "",
    engine: Engine | None = None,
) -> FastAPI:
    """A FastAPI app with the service's routers plus /health, /ready, /metrics and /docs."""
    logs.configure(settings.name, settings.log_level, settings.log_json)
    engine = engine or create_engine(
        settings.database_url, pool_size=settings.pool_size, pool_pre_ping=True
    )
    metrics = Metrics(engine, settings.consumers, settings.kafka_bootstrap_servers)
    app = FastAPI(title=title or settings.name, description=description)
    app.state.service = ServiceApp(settings, engine, metrics, tuple(migrations))
    errors.install(app)

    @app.middleware("http")
    async def trace_and_measure(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        # The request's span: a child of the caller's when it sent a traceparent.
        trace = TraceContext.continuing(request.headers.get(TRACEPARENT))
        token = logs.current_trace.set(trace)
        started = time.perf_counter()
        try:
            response = await call_next(request)
        finally:
            logs.current_trace.reset(token)
        route = request.scope.get("route")
        template = getattr(route, "path", "unmatched")
        elapsed = time.perf_counter() - started
        metrics.requests.labels(request.method, template, str(response.status_code)).inc()
        metrics.latency.labels(request.method, template).observe(elapsed)
        response.headers[TRACEPARENT] = trace.header()
        token = logs.current_trace.set(trace)
        log.info(
            "%s %s -> %d",
            request.method,
            request.url.path,
            response.status_code,
            extra={
                "method": request.method,
                "path": request.url.path,
                "status": response.status_code,
                "ms": round(elapsed * 1000, 1),
            },
        )
        logs.current_trace.reset(token)
        return response

    @app.get("/health", tags=["operations"], summary="the process is alive")
    def health() -> dict[str, str]:
        return {"status": "alive", "service": settings.name}

    @app.get("/ready", tags=["operations"], summary="database reachable, migrations at head")
    async def ready() -> JSONResponse:
        problems = await run_in_threadpool(app.state.service.readiness)
        if problems:
            return errors.problem(503, "Service Unavailable", "; ".join(problems))
        return JSONResponse({"status": "ready", "service": settings.name})

    @app.get("/metrics", tags=["operations"], summary="Prometheus metrics")
    async def prometheus() -> Response:
        body = await run_in_threadpool(generate_latest, metrics.registry)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    for router in routers:
        app.include_router(router)
    return app
