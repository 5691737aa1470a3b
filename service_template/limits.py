"""The request body limit, as a plain ASGI middleware: a body over the limit is a 413
problem+json, whether its size is declared (Content-Length) or not (a chunked upload)."""

from __future__ import annotations

from typing import Any

from service_template import errors

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Any
Send = Any


class BodyLimit:
    """Reads a request's body before the app runs, counting while it streams in, and answers
    413 as soon as it passes ``max_bytes``: a declared length over it is refused unread, an
    undeclared one once the limit is crossed. At most ``max_bytes`` plus one chunk is ever held
    in memory, so a body of hundreds of megabytes costs what the limit does; the app gets the
    body it may take, replayed as one message."""

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._refuse(send, f"the request body is {declared} bytes")
            return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away: nobody to answer
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._refuse(send, f"the request body passed {self.max_bytes} bytes")
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        await self.app(scope, _replay(b"".join(chunks), receive), send)

    async def _refuse(self, send: Send, what: str) -> None:
        response = errors.problem(
            413,
            errors.title(413),
            f"{what}; the limit is {self.max_bytes} bytes (setting max_request_bytes)",
            # The rest of the body is never read: the connection is not reused for another
            # request, so the unread bytes cannot be taken for one.
            headers={"Connection": "close"},
        )
        await send(
            {
                "type": "http.response.start",
                "status": response.status_code,
                "headers": response.raw_headers,
            }
        )
        await send({"type": "http.response.body", "body": response.body})


def _content_length(scope: Scope) -> int | None:
    """The declared body size; None when not declared (or not a number: the server's to judge)."""
    for name, value in scope.get("headers") or ():
        if name == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isdigit() else None
    return None


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` giving ``body`` in one message, then what the server says (a disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()  # type: ignore[no-any-return]
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay
