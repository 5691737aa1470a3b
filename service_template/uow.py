"""Unit of work per request: one session, one transaction, committed by the framework after the
route returned a successful response (rolled back otherwise). Routes never commit.

The unit is `outbox.UnitOfWork`, the same one inbox handlers get: the service's outbox, the
request's span as trace context, the events published so far."""

from __future__ import annotations

import contextvars
import functools
import hashlib
import inspect
import json
import re
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Header, Request
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from sqlalchemy import bindparam, select, text, update
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from outbox.unit import UnitOfWork
from service_template.errors import Problem
from service_template.idempotency import idempotency
from service_template.logs import current_trace

MAX_KEY = 255
# Visible ASCII and space: what an HTTP header carries unmangled (a 400 otherwise).
KEY_PATTERN = rf"^[\x20-\x7e]{{1,{MAX_KEY}}}$"
_KEY = re.compile(KEY_PATTERN)
IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        description="Retries with the same key and body get the first response and create "
        "nothing; the same key with another body is a 409 Conflict.",
        # Documented, and checked by `idempotent` (a 400, not FastAPI's 422).
        json_schema_extra={"minLength": 1, "maxLength": MAX_KEY, "pattern": KEY_PATTERN},
    ),
]


# Built once: a statement made per request costs more CPU in SQLAlchemy (its construction and
# cache key) than its round trip to Postgres. The claim is text: SQLAlchemy cannot cache the
# PostgreSQL dialect's INSERT (it compiled it again for every request).
_CLAIM = text(
    f"INSERT INTO {idempotency.name} (scope, key, fingerprint)"
    " VALUES (:scope, :key, :fingerprint) ON CONFLICT DO NOTHING RETURNING key"
)
_THE_KEY = (idempotency.c.scope == bindparam("the_scope")) & (
    idempotency.c.key == bindparam("the_key")
)
_FIRST = select(idempotency.c.fingerprint, idempotency.c.status_code, idempotency.c.response).where(
    _THE_KEY
)
_RECORD = update(idempotency).where(_THE_KEY)


def idempotent(
    uow: UnitOfWork,
    request: Request,
    key: str | None,
    body: Any,
    produce: Callable[[], tuple[int, Any]],
) -> JSONResponse:
    """Run ``produce`` (returning status and body) once per Idempotency-Key.

    The key, a fingerprint of the request and the response are stored in this transaction:
    a retry with the same key and body gets the first response and creates nothing; the same
    key with another body is a 409 (the key is taken: a conflict with state, which the
    document can declare; the body alone is valid). A concurrent retry waits on the key's row
    lock.

    Args:
        uow: The request's unit of work (`unit_of_work`): the key is stored in its transaction.
        request: The request; its method and path scope the key.
        key: The request's Idempotency-Key header (`IdempotencyKey`); None runs ``produce``
            without storing anything.
        body: The request's body, fingerprinted to tell a retry from another request.
        produce: Does the route's work and returns the response's status and body; run once
            per key.
    """
    if key is None:
        status, payload = produce()
        return JSONResponse(_jsonable(payload), status_code=status)
    if not _KEY.fullmatch(key):
        raise Problem(400, f"Idempotency-Key must be 1 to {MAX_KEY} visible ASCII characters")
    scope = f"{request.method} {request.url.path}"
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), default=jsonable_encoder)
    fingerprint = hashlib.sha256(f"{scope}\n{canonical}".encode()).hexdigest()
    at = {"the_scope": scope, "the_key": key}
    claimed = uow.session.execute(
        _CLAIM, {"scope": scope, "key": key, "fingerprint": fingerprint}
    ).first()
    if claimed is None:
        row = uow.session.execute(_FIRST, at).one()
        if row.fingerprint != fingerprint:
            raise Problem(409, "this Idempotency-Key was used with a different request body")
        return JSONResponse(
            row.response, status_code=row.status_code, headers={"Idempotent-Replayed": "true"}
        )
    status, payload = produce()
    encoded = _jsonable(payload)
    uow.session.execute(_RECORD, {**at, "status_code": status, "response": encoded})
    return JSONResponse(encoded, status_code=status)


_NATIVE = (str, int, float, bool, type(None))


def _jsonable(value: Any) -> Any:
    """``value`` as JSON-native data: itself when it already is (what a route returning
    ``model_dump(mode="json")`` gives, checked without copying), else FastAPI's encoding."""
    if _is_native(value):
        return value
    return jsonable_encoder(value)


def _is_native(value: Any) -> bool:
    if isinstance(value, _NATIVE):
        return True
    if type(value) is dict:
        return all(type(k) is str and _is_native(v) for k, v in value.items())
    if type(value) is list:
        return all(_is_native(v) for v in value)
    return False


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
