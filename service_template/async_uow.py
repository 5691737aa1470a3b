"""Unit of work per request for ``async def`` routes: one AsyncSession, one transaction,
committed (awaited) by the framework after the route returned a successful response, rolled
back otherwise. Routes never commit. The unit is `outbox.AsyncUnitOfWork`, which publishes as
the synchronous unit does; async and synchronous routers live side by side in one app."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import Request
from fastapi.responses import Response
from fastapi.routing import APIRoute
from sqlalchemy.ext.asyncio import AsyncSession

from outbox.aio import AsyncUnitOfWork
from service_template.logs import current_trace


async def async_unit_of_work(request: Request) -> AsyncUnitOfWork:
    """FastAPI dependency: the request's async unit of work (routes of an `async_service_router`).

    Args:
        request: The request being served, whose unit of work the route opened.
    """
    uow = getattr(request.state, "async_uow", None)
    if uow is None:
        raise RuntimeError(
            "async_unit_of_work needs a route of async_service_router (AsyncUnitOfWorkRoute)"
        )
    return uow  # type: ignore[no-any-return]


class AsyncUnitOfWorkRoute(APIRoute):
    """Opens the request's AsyncSession and transaction, commits it after a successful
    response (built and serialised first, so a serialisation error leaves nothing committed),
    else rolls back; the session goes back to the pool either way."""

    def get_route_handler(self) -> Callable[[Request], Any]:
        original = super().get_route_handler()

        async def handler(request: Request) -> Response:
            service = request.app.state.service
            async with AsyncSession(service.async_engine) as session:
                uow = AsyncUnitOfWork(session, service.outbox, current_trace.get())
                request.state.async_uow = uow
                await session.begin()
                try:
                    response: Response = await original(request)
                except BaseException:
                    await session.rollback()
                    raise
                if response.status_code >= 400:
                    await session.rollback()
                    return response
                await session.commit()
            service.metrics.published(uow.published)  # what committed
            return response

        return handler
