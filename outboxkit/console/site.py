"""What every console route shares (`Site`: the configuration, what it reads and does, the page
templates) and how a page is answered: signed-in users only, security headers on every answer."""

from __future__ import annotations

import asyncio
import base64
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fastapi import Request
from fastapi.responses import RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from sqlalchemy.engine import Engine

from outboxkit.console import auth
from outboxkit.console.actions import ActionRefused, Operator
from outboxkit.console.overview import OverviewReader
from outboxkit.console.shapes import Exact, ago, cause_kind, count, visible

HERE = Path(__file__).parent
COOKIE = "outboxkit_console"
HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; "
    "form-action 'self'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


@dataclass
class ConsoleConfig:
    """What the console needs besides what it reads: users (and the file they are read
    again from, when there is one), the signing key, links."""

    users: dict[str, tuple[str, str]]
    users_file: Path | None = None
    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    trace_url: str | None = None
    docs_url: str | None = None
    secure_cookie: bool = False


@dataclass
class Site:
    """The console's parts, one per app (``app.state.site``)."""

    config: ConsoleConfig
    reader: OverviewReader
    operator: Operator
    pages: Jinja2Templates = field(init=False)
    users: auth.Users = field(init=False)
    revoked: auth.Revoked = field(init=False, default_factory=auth.Revoked)
    sign_ins: auth.SignInLimit = field(init=False, default_factory=auth.SignInLimit)
    # Password checks at once (scrypt: 16 MiB and ~50 ms each); more wait their turn on the
    # event loop, so a flood of sign-ins cannot take every worker thread from the pages.
    checks: asyncio.Semaphore = field(init=False, default_factory=lambda: asyncio.Semaphore(2))

    def __post_init__(self) -> None:
        self.users = auth.Users(self.config.users, self.config.users_file)
        self.pages = Jinja2Templates(directory=HERE / "templates")
        self.pages.env.globals.update(
            ago=ago, carried=carried, cause_kind=cause_kind, count=count,
            docs_url=self.config.docs_url,
        )  # fmt: skip
        self.pages.env.filters["exact"] = Exact
        self.pages.env.finalize = visible

    @property
    def engines(self) -> dict[str, Engine]:
        """Each watched consumer's database engine (for reads)."""
        return {w.consumer: w.engine for w in self.reader.watched}

    def engine(self, consumer: str) -> Engine:
        """The engine of ``consumer``; refused for a consumer the console does not watch."""
        engines = self.engines
        if consumer not in engines:
            raise ActionRefused(f"the console watches no job of consumer {consumer!r}")
        return engines[consumer]

    def user(self, request: Request) -> auth.User | None:
        """The signed-in user of ``request`` (None: nobody, or a session that does not hold:
        ended, logged out, or of a user the users file no longer names as they signed in)."""
        return auth.read_session(
            self.config.secret,
            request.cookies.get(COOKIE),
            self.users.current(),
            revoked=self.revoked,
        )

    def page(
        self,
        request: Request,
        user: auth.User | None,
        name: str,
        status: int = 200,
        **context: Any,
    ) -> Response:
        """The template ``name`` rendered for ``user``."""
        return self.pages.TemplateResponse(
            request, name, {"user": user, **context}, status_code=status
        )

    def problem(self, request: Request, user: auth.User | None, status: int, text: str) -> Response:
        """A page saying what was not done and why."""
        return self.page(request, user, "problem.html", status, problem=text)


def carried(text: str) -> str:
    """``text`` as a form's hidden value keeps it byte for byte (base64url of its UTF-8)."""
    return base64.urlsafe_b64encode(text.encode()).decode("ascii")


def uncarried(value: str) -> str:
    """The text `carried` encoded; ActionRefused when it did not arrive intact."""
    try:
        return base64.b64decode(value.encode("ascii"), altchars=b"-_", validate=True).decode()
    except (ValueError, UnicodeError):
        raise ActionRefused(
            "the group's cause did not arrive intact: open the group again"
        ) from None


def site_of(request: Request) -> Site:
    """The `Site` of the app serving ``request``."""
    found: Site = request.app.state.site
    return found


async def signed_in(request: Request, build: Callable[[Site, auth.User], Response]) -> Response:
    """``build``'s page for the signed-in user (in a worker thread: it reads the databases),
    else a redirect to the login form that comes back here."""
    site = site_of(request)
    user = site.user(request)
    if user is None:
        here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse("/login?" + urlencode({"next": here}), 303)
    return await asyncio.to_thread(build, site, user)


def safe_next(target: str) -> str:
    """A local path only: a link cannot send a user to another site after they sign in
    (browsers read a backslash as a slash, so ``/\\host`` would be another site, and a control
    character may be dropped from it: neither is kept)."""
    local = target.startswith("/") and not target.startswith("//")
    plain = "\\" not in target and all(c >= " " and c != "\x7f" for c in target)
    return target if local and plain else "/"


def same_origin(request: Request) -> bool:
    """Whether a POST came from a page of this console (browsers send Origin with a POST;
    one without it, from a script, is judged by its CSRF token alone; "null" is refused)."""
    origin = request.headers.get("origin")
    if origin is None:
        return True
    return origin != "null" and origin.split("://", 1)[-1] == request.headers.get("host", "")
