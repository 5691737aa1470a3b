"""Unit of work per request: one session, one transaction, committed by the framework after the
route returned a successful response (rolled back otherwise). Routes never commit.

The unit is `outbox.UnitOfWork`, the same one inbox handlers get: the service's outbox, the
request's span as trace context, the events published so far."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Any

from anyio import to_thread
from fastapi import Request
from fastapi.responses import Response
from fastapi.routing import APIRoute
from sqlalchemy import Engine
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.orm import Session
from sqlalchemy.pool import QueuePool
from starlette.concurrency import run_in_threadpool

from outbox.unit import UnitOfWork
from service_template.logs import current_trace


async def unit_of_work(request: Request) -> UnitOfWork:
    """FastAPI dependency: the request's unit of work (routes of a `ServiceApp` router).

    Asynchronous because it does no I/O: FastAPI runs a synchronous dependency in its thread
    pool, a hop per request for a lookup.

    Args:
        request: The request being served, whose unit of work the route opened.
    """
    uow = getattr(request.state, "uow", None)
    if uow is None:
        raise RuntimeError("unit_of_work needs a route of ServiceApp.router (UnitOfWorkRoute)")
    return uow  # type: ignore[no-any-return]


class _Serving:
    """A request's session and whether its transaction is finished (committed or rolled back)."""

    __slots__ = ("finished", "session")

    def __init__(self, session: Session) -> None:
        self.session, self.finished = session, False

    def finish(self, commit: bool) -> None:
        self.finished = True
        _finish(self.session, commit)


# The transaction of the request being served, for the endpoint wrapper of `UnitOfWorkRoute`
# (contextvars follow the request into the thread pool that runs a synchronous endpoint).
_SERVING: contextvars.ContextVar[_Serving | None] = contextvars.ContextVar("serving", default=None)


class UnitOfWorkRoute(APIRoute):
    """Opens the request's transaction, commits it after a successful response, else rolls
    back. The response is built (and serialised) before the commit, so a serialisation error
    cannot leave committed rows behind an error response.

    A synchronous endpoint that returns a `Response` (built, as `idempotent`'s is) with a status
    below 400 commits in the thread it ran in: one hop from the event loop to the thread pool per
    request instead of two (one for the endpoint, one for the commit; the two were ~11% of a
    POST's CPU in a profile of the orders service). Other endpoints commit after FastAPI has
    serialised what they returned."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        if not inspect.iscoroutinefunction(inspect.unwrap(endpoint)):
            endpoint = _committing(endpoint)
        super().__init__(path, endpoint, **kwargs)

    def get_route_handler(self) -> Callable[[Request], Any]:
        original = super().get_route_handler()

        async def handler(request: Request) -> Response:
            service = request.app.state.service
            async with service.admission.admitted():
                return await serve(request, service)

        async def serve(request: Request, service: Any) -> Response:
            session = Session(service.engine)
            uow = UnitOfWork(session, service.outbox, current_trace.get())
            request.state.uow = uow
            serving = _Serving(session)
            token = _SERVING.set(serving)
            try:
                session.begin()
                response: Response = await original(request)
                ok = response.status_code < 400
                if not serving.finished:
                    await run_in_threadpool(serving.finish, ok)  # one hop off the event loop
                if ok:
                    service.metrics.published(uow.published)  # what committed
                return response
            except BaseException:
                if not serving.finished:
                    await run_in_threadpool(serving.finish, False)
                raise
            finally:
                _SERVING.reset(token)

        return handler


def _committing(endpoint: Callable[..., Any]) -> Callable[..., Any]:
    """``endpoint`` committing its request's transaction in its own thread when it returns a
    built `Response` with a status below 400 (FastAPI reads the parameters, the types and the
    globals of the wrapped function through ``__wrapped__``)."""

    @functools.wraps(endpoint)
    def call(*args: Any, **kwargs: Any) -> Any:
        result = endpoint(*args, **kwargs)
        serving = _SERVING.get()
        if serving is not None and isinstance(result, Response) and result.status_code < 400:
            serving.finish(True)
        return result

    return call


def _finish(session: Session, commit: bool) -> None:
    """Commit (or roll back) the request's transaction and give the connection back."""
    try:
        if commit:
            session.commit()
        else:
            session.rollback()
    finally:
        session.close()


class Admission:
    """How many requests of synchronous unit-of-work routes may be in their transaction at once:
    as many as the engine's pool has connections, and one fewer than the thread pool has
    threads. A synchronous route waits for a connection in a thread, and its transaction is
    finished in a thread; with more requests let in than connections, the threads could all be
    taken by requests waiting for a connection while those holding one wait for a thread to
    give it back (every request then a 503 after the pool's timeout). Requests beyond the limit
    wait on the event loop instead, for at most the pool's timeout (then an outage: 503).

    Args:
        engine: The engine the routes' sessions use.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        # One semaphore per event loop (an app may be served by several loops in turn: tests).
        self._gates: weakref.WeakKeyDictionary[Any, asyncio.Semaphore] = weakref.WeakKeyDictionary()

    def limit(self) -> int:
        """The number of requests let in at once."""
        threads = int(to_thread.current_default_thread_limiter().total_tokens) - 1
        pool = self.engine.pool
        if isinstance(pool, QueuePool) and pool._max_overflow >= 0:
            return max(1, min(threads, pool.size() + pool._max_overflow))
        return max(1, threads)

    @contextlib.asynccontextmanager
    async def admitted(self) -> AsyncIterator[None]:
        loop = asyncio.get_running_loop()
        gate = self._gates.get(loop)
        if gate is None:
            gate = self._gates[loop] = asyncio.Semaphore(self.limit())
        pool = self.engine.pool
        wait = pool.timeout() if isinstance(pool, QueuePool) else None
        try:
            await asyncio.wait_for(gate.acquire(), wait)
        except TimeoutError:
            raise PoolTimeout(
                f"a request waited {wait:g} s for one of the {self.limit()} transactions its "
                "routes may run at once (the database's pool)"
            ) from None
        try:
            yield
        finally:
            gate.release()
