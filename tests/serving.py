"""An ASGI app served by uvicorn on a free loopback port, in a thread of the test's process (as
`outboxkit console` and the services serve theirs), for tests that need a real HTTP server."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn

from outboxkit_workshop.devstack.processes import free_port


@contextlib.contextmanager
def serving(app: Any) -> Iterator[int]:
    """``app`` served on 127.0.0.1 until the block ends; its port."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "the server did not start"
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(10)
