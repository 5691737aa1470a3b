"""Per-request trace context, metrics and log line, as a plain ASGI middleware.

Starlette's ``@app.middleware("http")`` (BaseHTTPMiddleware) runs the app in a second task with
memory streams between the two; this one wraps ``send`` instead, which is most of what the
decorator cost per request."""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

from opentelemetry.trace import SpanKind

from outboxkit.kernel.tracing import spans
from outboxkit.kernel.tracing.context import TraceContext
from outboxkit.kernel.wire import TRACEPARENT
from service_template import logs
from service_template.metrics import Metrics

log = logging.getLogger("service")
_TRACEPARENT = TRACEPARENT.encode()

Scope = dict[str, Any]
Receive = Any
Send = Any


class TraceAndMeasure:
    """The request's span (a child of the caller's traceparent, echoed in the response),
    request count and latency per route template, and one log line per request.

    With tracing on, the span is FastAPI's own server span (its built-in telemetry, current
    here), else, on a FastAPI without it, a server span of this middleware."""

    def __init__(self, app: Any, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        caller = dict(scope.get("headers") or ()).get(_TRACEPARENT)
        request = None
        trace = spans.recording()  # FastAPI's own request span, when its telemetry records
        if trace is None:
            request = spans.start(
                scope["method"],  # named "METHOD /route/template" once routed
                parent=TraceContext.parse(caller.decode("latin-1") if caller else None),
                kind=SpanKind.SERVER,
                attributes={"http.request.method": scope["method"], "url.path": scope["path"]},
            )
            trace = request.context
        status = 500  # when the app fails before answering

        async def answer(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [*message.get("headers", ()), (_TRACEPARENT, trace.header().encode())]
                message = {**message, "headers": headers}
            await send(message)

        token = logs.current_trace.set(trace)
        started = time.perf_counter()
        try:
            with spans.as_current(request) if request else contextlib.nullcontext():
                await self.app(scope, receive, answer)
        finally:
            template = self._measure(scope, status, time.perf_counter() - started)
            logs.current_trace.reset(token)
            if request is not None:
                request.span.update_name(f"{scope['method']} {template}")
                request.end(
                    {"http.route": template, "http.response.status_code": status},
                    error=f"HTTP {status}" if status >= 500 else None,
                )

    def _measure(self, scope: Scope, status: int, elapsed: float) -> str:
        """Count and log the request; returns its route template."""
        method, path = scope["method"], scope["path"]
        template = getattr(scope.get("route"), "path", "unmatched")
        self.metrics.requests.labels(method, template, str(status)).inc()
        self.metrics.latency.labels(method, template).observe(elapsed)
        log.info(
            "%s %s -> %d",
            method,
            path,
            status,
            extra={
                "method": method,
                "path": path,
                "status": status,
                "ms": round(elapsed * 1000, 1),
            },
        )
        return str(template)
