"""The console's web app: server-rendered pages (Jinja2) and a small script that refreshes the
live parts while a page is visible; no build step. Every page needs a signed-in user, every
action an operator (`forms`); an unreachable database is a 503 page saying so, never a 500."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from fastapi import FastAPI, Form, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from sqlalchemy.exc import DataError, OperationalError

from outboxkit.console import auth, forms, views
from outboxkit.console.actions import ActionRefused, Operator
from outboxkit.console.kafka_gate import KafkaUnanswered
from outboxkit.console.overview import OverviewReader
from outboxkit.console.site import COOKIE, HEADERS, HERE, ConsoleConfig, Site, safe_next, site_of

__all__ = ["ConsoleConfig", "create_console"]

log = logging.getLogger(__name__)


def create_console(config: ConsoleConfig, reader: OverviewReader, operator: Operator) -> FastAPI:
    """The console's app on ``reader`` (what it shows) and ``operator`` (what it does)."""
    app = FastAPI(title="outboxkit console", docs_url=None, redoc_url=None, openapi_url=None)
    site = Site(config, reader, operator)
    app.state.site = site
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    app.include_router(views.router)
    app.include_router(forms.router)

    @app.middleware("http")
    async def guarded(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        try:
            response = await call_next(request)
        except OperationalError as exc:  # a database outage: a 503 with what happens next
            response = site.problem(request, None, 503, _outage(exc))
        except ActionRefused as exc:  # a page of something the console does not watch
            response = site.problem(request, None, 404, str(exc))
        except KafkaUnanswered as exc:  # Kafka down, or being read by another page
            response = site.problem(request, None, 503, str(exc))
        except DataError as exc:  # a value the database cannot take (past a bigint, a NUL)
            cause = str(exc.orig or exc).strip().splitlines()[0]
            response = site.problem(request, None, 400, f"a value of the request: {cause}")
        except Exception:  # a bug: logged, and a page with the usual headers
            log.exception("console: unhandled error on %s %s", request.method, request.url.path)
            response = site.problem(request, None, 500, "the console failed; see its log")
        response.headers.update(HEADERS)
        return response

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        said = [
            f"{'.'.join(str(p) for p in e.get('loc', ())[1:]) or 'request'}: {e.get('msg', '')}"
            for e in exc.errors()[:3]
        ]
        return site.problem(request, None, 400, "; ".join(said))

    app.add_api_route("/healthz", _healthz, methods=["GET"], include_in_schema=False)
    app.add_api_route("/login", _login_form, methods=["GET"], response_class=HTMLResponse)
    app.add_api_route("/login", _login, methods=["POST"])
    app.add_api_route("/logout", _logout, methods=["POST"])
    return app


def _healthz() -> dict[str, str]:
    return {"status": "ok"}


def _login_form(request: Request, next: str = "/") -> Response:
    return site_of(request).page(request, None, "login.html", next=safe_next(next), failed=False)


async def _login(
    request: Request, name: str = Form(""), password: str = Form(""), next: str = Form("/")
) -> Response:
    site = site_of(request)
    address = request.client.host if request.client else "?"
    shown = name[:64]
    wait = site.sign_ins.wait(name, address)
    if wait > 0:
        log.warning("console: sign-in of %r from %s refused: too many failures", shown, address)
        response = site.page(
            request, None, "login.html", 429, next=safe_next(next), failed=False,
            limited=int(wait) + 1,
        )  # fmt: skip
        response.headers["Retry-After"] = str(int(wait) + 1)
        return response
    users = site.users.current()
    async with site.checks:
        found = await asyncio.to_thread(auth.authenticate, users, name, password)
    if found is None:
        failures = site.sign_ins.failed(name, address)
        log.warning("console: sign-in of %r from %s failed (%d in a row)", shown, address, failures)
        return site.page(request, None, "login.html", 401, next=safe_next(next), failed=True)
    site.sign_ins.succeeded(name)
    log.info("console: %s signed in from %s", name, address)
    response = RedirectResponse(safe_next(next), 303)
    response.set_cookie(
        COOKIE,
        auth.session_cookie(site.config.secret, *found, users[name][1]),
        max_age=auth.SESSION_SECONDS,
        httponly=True,
        samesite="strict",
        secure=site.config.secure_cookie,
    )
    return response


def _logout(request: Request) -> Response:
    """End the session: its cookie deleted, and the session itself, so a copy of the cookie
    holds no more. No token is asked: the cookie is SameSite=strict, so only a page of this
    console can send it, and ending one's own session is no harm to guard (a page opened
    before the session was renewed logs out too)."""
    site = site_of(request)
    user = site.user(request)
    if user is not None:
        site.revoked.add(user)
        log.info("console: %s logged out", user.name)
    response = RedirectResponse("/login", 303)
    response.delete_cookie(COOKIE)
    return response


def _outage(exc: Exception) -> str:
    lines = str(exc).strip().splitlines()
    detail = (lines[0] if lines else type(exc).__name__)[:200]
    return f"the database did not answer ({detail}); the console asks again on the next request"
