"""The app factory: `create_app(settings, routers=[...])` gives a service its plumbing."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.concurrency import run_in_threadpool

from migrations.runner import FRAMEWORK, Migrations
from outbox import at_commit
from outbox.publish import Outbox
from outboxkit.kernel import tracing
from outboxkit.kernel.engines import async_engine_for, engine_for
from outboxkit.kernel.secrets import read_secret
from service_template import errors, logs, openapi
from service_template.async_uow import AsyncUnitOfWorkRoute
from service_template.guards import Scrapes, SecurityHeaders, bearer_ok
from service_template.limits import BodyLimit
from service_template.measure import TraceAndMeasure
from service_template.metrics import Metrics
from service_template.settings import ServiceSettings
from service_template.uow import Admission, UnitOfWorkRoute

log = logging.getLogger("service")


def service_router(**kwargs: Any) -> APIRouter:
    """A router whose routes run in a unit of work (use `Depends(unit_of_work)` in them)."""
    return APIRouter(route_class=UnitOfWorkRoute, **kwargs)


def async_service_router(**kwargs: Any) -> APIRouter:
    """A router of ``async def`` routes, each in an async unit of work on an AsyncSession (use
    `Depends(async_unit_of_work)` in them); it lives beside `service_router`'s in one app."""
    return APIRouter(route_class=AsyncUnitOfWorkRoute, **kwargs)


@dataclass
class ServiceApp:
    """What the routes and the framework share: settings, engine, outbox, metrics, migrations.

    Attributes:
        settings: The service's settings, read once at start.
        engine: The service's database engine, pooled for serving requests.
        async_engine: The same database for ``async def`` routes (an AsyncEngine on the async
            driver), pooled alike; it connects when an async route first runs.
        metrics: The app's Prometheus metrics.
        migrations: The service's own Alembic chains, checked at head by /ready besides the
            framework's.
        outbox: How the routes' events are written: the one the settings describe.
        admission: How many requests of synchronous routes may be in a transaction at once.
    """

    settings: ServiceSettings
    engine: Engine
    async_engine: AsyncEngine
    metrics: Metrics
    migrations: Sequence[Migrations] = field(default_factory=tuple)
    outbox: Outbox = field(init=False)
    admission: Admission = field(init=False)

    def __post_init__(self) -> None:
        self.outbox = self.settings.outbox.build()
        self.admission = Admission(self.engine)

    def readiness(self) -> list[str]:
        """Problems that make the service not ready (empty when ready)."""
        try:
            with self.engine.connect() as conn:
                conn.execute(text("SELECT 1"))
        except Exception as exc:  # the detail in the log: not to whoever asks
            log.warning("not ready: database unreachable: %s", str(exc).splitlines()[0])
            return ["database unreachable"]
        problems = []
        for migrations in (FRAMEWORK, *self.migrations):
            current, head = migrations.current(self.engine.url), migrations.head()
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
    async_engine: AsyncEngine | None = None,
) -> FastAPI:
    """A FastAPI app with the service's routers plus /health, /ready, /metrics (behind a
    bearer token when configured) and, when the settings ask, /docs and /openapi.json; every
    answer with the security headers (`service_template.guards`).

    Args:
        settings: The service's settings, read once at the composition root.
        routers: The service's routers (`service_router`), included in this order.
        migrations: The service's own Alembic chains, which /ready checks at head besides the
            framework's.
        title: The OpenAPI title; None: the service's name.
        description: The OpenAPI description.
        engine: The database engine; None makes one from the settings, pooled for serving.
        async_engine: The engine of ``async def`` routes (`async_service_router`); None makes
            one from the settings, pooled alike.
    """
    logs.configure(settings.name, settings.log_level, settings.log_json)
    tracing.configure(settings.name)  # when OTEL_* ask for it (OTEL_SERVICE_NAME wins)
    pools = {
        "pool_size": settings.pool_size,
        "max_overflow": settings.pool_overflow,
        "pool_pre_ping": settings.pool_ping,
    }
    engine = engine or engine_for(settings.engine_url(), "service", **pools)
    at_commit.attach(engine)  # its routes publish through it
    async_engine = async_engine or async_engine_for(settings.engine_url(), "service", **pools)
    at_commit.attach(async_engine)
    metrics = Metrics(
        engine,
        settings.consumers,
        settings.kafka_bootstrap_servers,
        settings.kafka_security.resolve(),
    )
    service = ServiceApp(settings, engine, async_engine, metrics, tuple(migrations))

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        # Every replica releases scheduled messages when due; one at a time does (a lock).
        release = settings.outbox.release
        releaser = release.releaser(engine, service.outbox, metrics.release.released)
        if releaser is not None:
            releaser.start()
        try:
            yield
        finally:
            if releaser is not None:
                await run_in_threadpool(releaser.stop)
            await async_engine.dispose()  # its connections belong to this event loop

    docs = settings.api_docs
    app = FastAPI(
        title=title or settings.name,
        description=description,
        lifespan=lifespan,
        docs_url="/docs" if docs else None,
        redoc_url=None,
        openapi_url="/openapi.json" if docs else None,
    )
    app.state.service = service
    errors.install(app)
    openapi.install(app)

    app.add_middleware(BodyLimit, max_bytes=settings.max_request_bytes)
    app.add_middleware(SecurityHeaders)
    app.add_middleware(TraceAndMeasure, metrics=metrics)  # outermost: it sees the 413s too

    @app.get("/health", tags=["operations"], summary="the process is alive")
    def health() -> dict[str, str]:
        return {"status": "alive", "service": settings.name}

    @app.get("/ready", tags=["operations"], summary="database reachable, migrations at head")
    async def ready() -> JSONResponse:
        problems = await run_in_threadpool(app.state.service.readiness)
        if problems:
            return errors.problem(503, "Service Unavailable", "; ".join(problems))
        return JSONResponse({"status": "ready", "service": settings.name})

    token = None
    if settings.metrics_token_file is not None:
        prefix = str(settings.model_config.get("env_prefix") or "")
        variable = f"{prefix}METRICS_TOKEN_FILE"
        token = read_secret(settings.metrics_token_file, variable).encode()
    scrapes = Scrapes(lambda: generate_latest(metrics.registry))

    @app.get(
        "/metrics",
        tags=["operations"],
        summary="Prometheus metrics",
        response_class=PlainTextResponse,
        responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
    )
    async def prometheus(request: Request) -> Response:
        if token is not None and not bearer_ok(request, token):
            return errors.problem(401, "Unauthorized", "/metrics needs the scraper's token")
        body = await run_in_threadpool(scrapes.latest)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    for router in routers:
        app.include_router(router)
    return app
