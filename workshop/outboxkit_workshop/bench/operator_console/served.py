"""The console served over HTTP: its app by uvicorn in a thread of this process, and a client
signed in as the benchmark's user that asks for its pages."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from outboxkit_workshop.devstack.processes import LOOPBACK_ADDRESS, free_port, wait_until

USER = "bench"


@dataclass
class Served:
    """The console's app served by uvicorn in a thread of this process."""

    url: str
    server: Any
    thread: threading.Thread

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def serve(app: Any) -> Served:
    """``app`` served by uvicorn on a free loopback port, once it listens."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host=LOOPBACK_ADDRESS, port=port, log_level="warning", access_log=False)
    )
    thread = threading.Thread(target=server.run, name="bench-console", daemon=True)
    thread.start()
    wait_until("the console", lambda: bool(server.started), timeout=30)
    return Served(f"http://{LOOPBACK_ADDRESS}:{port}", server, thread)


def signed_in(url: str, password: str) -> Any:
    """An HTTP client on ``url`` holding a session of the benchmark's user."""
    import httpx

    client = httpx.Client(base_url=url, timeout=60)
    answer = client.post("/login", data={"name": USER, "password": password, "next": "/"})
    if answer.status_code != 303 or not client.cookies:
        client.close()
        raise RuntimeError(f"signing in to the console: HTTP {answer.status_code}")
    return client


def page(client: Any, path: str, params: dict[str, str] | None = None, *, shows: str) -> None:
    """GET a page; it must answer 200 with ``shows`` in it."""
    answer = client.get(path, params=params)
    if answer.status_code != 200 or shows not in answer.text:
        raise RuntimeError(f"GET {path}: HTTP {answer.status_code}, without {shows!r}")
