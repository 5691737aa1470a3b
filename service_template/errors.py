"""Errors as RFC 9457 problem+json. Bad input is a 4xx with a message, never a 500."""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from outboxkit.kernel.errors import OutboxError, is_transient

PROBLEM = "application/problem+json"
log = logging.getLogger(__name__)


class Problem(Exception):
    """Raise from a route for a client error with a message: ``Problem(404, "order not found")``.

    The response is an ``application/problem+json`` body (RFC 9457).

    Args:
        status: The HTTP status.
        detail: What went wrong, for the client.
        title: The problem's title; None: the status's standard phrase.
        **extra: More members of the problem's body.
    """

    def __init__(self, status: int, detail: str, *, title: str | None = None, **extra: Any):
        super().__init__(detail)
        self.status, self.detail, self.title, self.extra = status, detail, title, extra


def problem(
    status: int, title: str, detail: str, *, headers: dict[str, str] | None = None, **extra: Any
) -> JSONResponse:
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail, **extra}
    return JSONResponse(
        jsonable_encoder(body), status_code=status, media_type=PROBLEM, headers=headers
    )


# Seconds a client is asked to wait when the database is unreachable (a restart or failover
# takes a few seconds; the pool's pre-ping finds the new server on the next request).
RETRY_AFTER_SECONDS = 2


# RFC 9110's names of two statuses Python names after RFC 7231 before 3.13.
_RFC_9110 = {413: "Content Too Large", 422: "Unprocessable Content"}


def title(status: int) -> str:
    """A problem's title: the status's reason phrase (RFC 9110), "Error" for an unknown status."""
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        return "Error"
    return _RFC_9110.get(status, phrase)


def install(app: FastAPI) -> None:
    """Route every error through problem+json."""

    @app.exception_handler(Problem)
    async def _problem(request: Request, exc: Problem) -> JSONResponse:
        return problem(exc.status, exc.title or title(exc.status), exc.detail, **exc.extra)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
            for e in exc.errors()
        ]
        first = errors[0] if errors else {"loc": [], "msg": "invalid request"}
        where = ".".join(str(p) for p in first["loc"])
        return problem(422, title(422), f"{where}: {first['msg']}", errors=errors)

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> JSONResponse:
        # Starlette's own headers stay (a 405 names the allowed methods in Allow).
        headers = dict(exc.headers) if exc.headers else None
        return problem(exc.status_code, title(exc.status_code), str(exc.detail), headers=headers)

    @app.exception_handler(OutboxError)
    async def _event(request: Request, exc: OutboxError) -> JSONResponse:
        return problem(422, title(422), str(exc))

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> JSONResponse:
        if is_transient(exc):  # an outage, not a bug: tell the client when to retry
            log.warning(
                "database unreachable on %s %s: %s",
                request.method,
                request.url.path,
                str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
            )
            return problem(
                503,
                title(503),
                "the service's database is unreachable; retry later with the same Idempotency-Key",
                headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
            )
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return problem(500, title(500), "the service failed; see its logs")
