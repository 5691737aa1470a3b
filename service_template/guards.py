"""What a service's HTTP surface shows of itself: the security headers on every answer, the
scraper's token /metrics may ask for, and one scrape's body shared by scrapes that come close
together (each runs database and Kafka queries)."""

from __future__ import annotations

import hmac
import threading
import time
from collections.abc import Callable
from typing import Any

from fastapi import Request

Scope = dict[str, Any]
Message = dict[str, Any]

HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]
# JSON answers never load anything: no script, style or frame may come with them. The API
# documentation's page (when served) loads Swagger UI's script and style, and is left out.
CSP = (b"content-security-policy", b"default-src 'none'; frame-ancestors 'none'")
DOCS = ("/docs",)


class SecurityHeaders:
    """A plain ASGI middleware adding `HEADERS` to every answer, the `CSP` to every answer
    but the documentation's page, and ``Cache-Control: no-store`` where the route set none (an
    answer holds business data: no shared cache keeps it)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        extra = HEADERS if scope.get("path", "").startswith(DOCS) else [*HEADERS, CSP]

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                if not any(name.lower() == b"cache-control" for name, _ in headers):
                    headers.append((b"cache-control", b"no-store"))
                message["headers"] = headers + extra
            await send(message)

        await self.app(scope, receive, sending)


def bearer_ok(request: Request, token: bytes) -> bool:
    """Whether ``request`` carries ``Authorization: Bearer <token>``."""
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token)


class Scrapes:
    """The metrics' text, made again at most once every ``fresh`` seconds: a burst of scrapes
    (several Prometheus replicas, a curl loop) costs the queries of one."""

    def __init__(self, make: Callable[[], bytes], fresh: float = 1.0) -> None:
        self.make = make
        self.fresh = fresh
        self._last: tuple[float, bytes] | None = None
        self._lock = threading.Lock()

    def latest(self) -> bytes:
        """The text, made now unless the last one is under ``fresh`` seconds old."""
        with self._lock:
            now = time.monotonic()
            if self._last is None or now - self._last[0] >= self.fresh:
                self._last = (now, self.make())
            return self._last[1]
