"""Kafka Connect REST client: create-or-update, status, wait until RUNNING, restart, delete."""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from outboxkit.kernel.retry import wait_until


class ConnectError(RuntimeError):
    """Kafka Connect refused a request or a connector did not reach the wanted state."""


@dataclass(frozen=True)
class ConnectorStatus:
    """The state of a connector and of each of its tasks (with the trace of a FAILED one).

    Attributes:
        name: The connector's name.
        state: The connector's state as Connect reports it (``RUNNING``, ``PAUSED``,
            ``FAILED``, ``UNASSIGNED``...).
        tasks: Each task's id, state and trace (a FAILED task's, else None); a FAILED
            connector's own trace is task -1.
        workers: The worker (its REST host:port) each task is assigned to, by task id.
    """

    name: str
    state: str
    tasks: tuple[tuple[int, str, str | None], ...]
    workers: tuple[tuple[int, str], ...] = ()

    def worker_of(self, task: int) -> str | None:
        """The worker ``task`` runs on, when Connect says.

        Args:
            task: The task's id.
        """
        return next((worker for tid, worker in self.workers if tid == task), None)

    def __str__(self) -> str:
        return f"{self.state}, tasks {[state for _, state, _ in self.tasks]}"

    def all_in(self, state: str) -> bool:
        """True when the connector and at least one task, and every task, are in ``state``.

        Args:
            state: A state as Connect reports it (``RUNNING``, ``PAUSED``...).
        """
        return (
            self.state == state and bool(self.tasks) and all(s == state for _, s, _ in self.tasks)
        )

    @property
    def running(self) -> bool:
        """True when the connector and at least one task, and every task, are RUNNING."""
        return self.all_in("RUNNING")

    @property
    def failure(self) -> str | None:
        """The first FAILED trace, or None."""
        for task_id, state, trace in self.tasks:
            if state == "FAILED":
                return f"task {task_id} FAILED:\n{trace or '(no trace)'}"
        return f"connector {self.name} FAILED" if self.state == "FAILED" else None


def parse_status(body: dict[str, Any]) -> ConnectorStatus:
    """Turn Connect's /status JSON into a ConnectorStatus."""
    connector = body.get("connector", {})
    tasks = tuple(
        (int(t.get("id", 0)), str(t.get("state", "UNKNOWN")), t.get("trace"))
        for t in body.get("tasks", [])
    )
    workers = tuple(
        (int(t.get("id", 0)), str(t["worker_id"]))
        for t in body.get("tasks", [])
        if "worker_id" in t
    )
    state = str(connector.get("state", "UNKNOWN"))
    if state == "FAILED" and connector.get("trace"):
        tasks = (*tasks, (-1, "FAILED", connector["trace"]))
    return ConnectorStatus(
        name=str(body.get("name", "")), state=state, tasks=tasks, workers=workers
    )


def _at(name: str, what: str = "") -> str:
    """The REST path of connector ``name`` (``what``: one of its resources)."""
    path = f"/connectors/{urllib.parse.quote(name, safe='')}"
    return f"{path}/{what}" if what else path


def wait_for_state(
    read: Callable[[], ConnectorStatus | None],
    name: str,
    wanted: str,
    *,
    timeout: float,
    poll: float = 0.5,
) -> ConnectorStatus:
    """The status ``read`` returns once connector ``name`` and its tasks are ``wanted``
    (``read`` raises to stop early); `ConnectError` after ``timeout`` seconds."""
    status = wait_until(
        read,
        until=lambda status: status is not None and status.all_in(wanted),
        timeout=timeout,
        poll=poll,
        what=f"connector {name} to be {wanted}",
        error=ConnectError,
    )
    assert status is not None  # what `until` holds for
    return status


def retryable(status: int, payload: Any) -> bool:
    """True for an answer Connect says to try again: 409 (the cluster is rebalancing), or a
    500 whose message says the request can be safely retried (its config topic could not be
    written, e.g. while a broker is lost)."""
    message = str(payload.get("message", "")) if isinstance(payload, dict) else ""
    return status == 409 or (status == 500 and "can be safely retried" in message)


class ConnectClient:
    """A thin client for one Kafka Connect cluster's REST API.

    Args:
        url: The REST API's base URL (``http://connect:8083``).
        timeout: Seconds each HTTP request may take.
        auth: A user name and password for HTTP basic authentication (Connect's
            BasicAuthSecurityRestExtension); None: none.
    """

    def __init__(
        self, url: str, *, timeout: float = 30.0, auth: tuple[str, str] | None = None
    ) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._http = httpx.Client(
            timeout=timeout,
            auth=None if auth is None else httpx.BasicAuth(*auth),
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )

    def __repr__(self) -> str:
        return f"ConnectClient({self.url!r})"

    def close(self) -> None:
        """Close the client's connections."""
        self._http.close()

    def _request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """The answer's status and JSON body; an error's body is ``{"message": ...}``."""
        if not self.url.startswith(("http://", "https://")):
            raise ConnectError(f"no Kafka Connect REST URL (got {self.url!r})")
        try:
            response = self._http.request(method, self.url + path, json=body)
        except httpx.TransportError as exc:
            raise ConnectError(f"Kafka Connect at {self.url} is unreachable: {exc}") from exc
        if response.is_success:
            return response.status_code, response.json() if response.content else None
        try:
            detail = response.json().get("message", response.text)
        except (ValueError, AttributeError):
            detail = response.text
        return response.status_code, {"message": detail}

    def _expect(self, method: str, path: str, body: Any = None, ok: tuple[int, ...] = ()) -> Any:
        status, payload = self._request(method, path, body)
        if status not in ok:
            message = payload.get("message") if isinstance(payload, dict) else payload
            raise ConnectError(f"{method} {path} -> HTTP {status}: {message}")
        return payload

    def alive(self) -> bool:
        """True when the worker's REST API answers."""
        try:
            status, _ = self._request("GET", "/")
        except ConnectError:
            return False
        return status == 200

    def ready(self) -> bool:
        """True when the worker has finished starting (KIP-1017's /health answers 200).

        The REST root answers as soon as the HTTP server is up, before the worker has read its
        internal topics and joined the group: a request that needs the herder then waits in its
        queue (after a kill -9 under exactly-once source, until the dead worker's open
        transaction on the offsets topic times out, about a minute) and a client times out.
        """
        try:
            status, _ = self._request("GET", "/health")
        except ConnectError:
            return False
        if status == 404:  # before its resources are registered, or a worker before Kafka 3.9
            return self.alive()
        return status == 200

    def version(self) -> str:
        """The Kafka Connect version the worker reports."""
        return str(self._expect("GET", "/", ok=(200,)).get("version", "unknown"))

    def plugins(self) -> list[str]:
        """The classes of every plugin the worker has: connectors, transforms, predicates,
        converters (KIP-769's ``connectorsOnly=false``)."""
        found = self._expect("GET", "/connector-plugins?connectorsOnly=false", ok=(200,))
        return sorted({str(p["class"]) for p in found})

    def connectors(self) -> list[str]:
        """Names of the connectors on the cluster."""
        return list(self._expect("GET", "/connectors", ok=(200,)))

    def put_config(self, name: str, config: dict[str, str], *, wait: float = 60.0) -> None:
        """Create the connector or update its config (idempotent PUT), retried while the
        cluster says the request may be (`retryable`: rebalancing, or its config topic not
        written yet, as just after a broker was lost).

        Args:
            name: The connector's name.
            config: Its whole config, every value a string (`build_connector_config`).
            wait: Seconds to retry a retryable answer before raising `ConnectError`.
        """
        path = _at(name, "config")
        status, payload = wait_until(
            lambda: self._request("PUT", path, config),
            until=lambda answer: not retryable(*answer),
            timeout=wait,
            poll=1.0,
            what=f"PUT {path} to be taken",
            error=ConnectError,
        )
        if status not in (200, 201):
            message = payload.get("message") if isinstance(payload, dict) else payload
            raise ConnectError(f"PUT {path} -> HTTP {status}: {message}")

    def get_config(self, name: str) -> dict[str, str] | None:
        """The connector's config, or None when it does not exist.

        Args:
            name: The connector's name.
        """
        status, payload = self._request("GET", _at(name, "config"))
        if status == 404:
            return None
        if status != 200:
            raise ConnectError(f"GET config of {name} -> HTTP {status}: {payload}")
        return dict(payload)

    def stored_sources(self, name: str) -> list[str]:
        """The source names (Debezium's ``server`` partition, the ``topic.prefix``) the
        connector has stored offsets under (KIP-875's offsets API; [] when the worker has none,
        the connector does not exist, or the worker predates Kafka 3.6).

        Args:
            name: The connector's name.
        """
        status, payload = self._request("GET", _at(name, "offsets"))
        entries = (payload.get("offsets") or ()) if isinstance(payload, dict) else ()
        found = [e.get("partition") for e in entries if status == 200 and isinstance(e, dict)]
        return sorted({p["server"] for p in found if isinstance(p, dict) and "server" in p})

    def status(self, name: str) -> ConnectorStatus | None:
        """The connector's status, or None when it does not exist (yet).

        Args:
            name: The connector's name.
        """
        status, payload = self._request("GET", _at(name, "status"))
        if status == 404:
            return None
        if status != 200:
            raise ConnectError(f"GET status of {name} -> HTTP {status}: {payload}")
        return parse_status(payload)

    def wait_running(
        self, name: str, *, timeout: float = 120.0, poll: float = 0.5
    ) -> ConnectorStatus:
        """Wait until the connector and all its tasks are RUNNING; a FAILED task raises at once.

        Args:
            name: The connector's name.
            timeout: Seconds to wait before raising `ConnectError`.
            poll: Seconds between two status reads.
        """
        return self._wait_state(name, "RUNNING", timeout, poll)

    def pause(self, name: str, *, timeout: float = 60.0) -> None:
        """Pause the connector and wait until it and its tasks report PAUSED (the slot keeps
        the WAL; nothing is lost, events wait).

        Args:
            name: The connector's name.
            timeout: Seconds to wait for PAUSED before raising `ConnectError`.
        """
        self._expect("PUT", _at(name, "pause"), ok=(202,))
        self._wait_state(name, "PAUSED", timeout)

    def resume(self, name: str, *, timeout: float = 60.0) -> None:
        """Resume a paused connector and wait until it and its tasks are RUNNING.

        Args:
            name: The connector's name.
            timeout: Seconds to wait for RUNNING before raising `ConnectError`.
        """
        self._expect("PUT", _at(name, "resume"), ok=(202,))
        self._wait_state(name, "RUNNING", timeout)

    def _wait_state(
        self, name: str, wanted: str, timeout: float, poll: float = 0.1
    ) -> ConnectorStatus:
        """The connector's status once it and its tasks are ``wanted``; FAILED raises at once."""

        def unfailed() -> ConnectorStatus | None:
            status = self.status(name)
            if status is not None and status.failure:
                raise ConnectError(f"connector {name} failed:\n{status.failure}")
            return status

        return wait_for_state(unfailed, name, wanted, timeout=timeout, poll=poll)

    def tasks_run(self, name: str, config: dict[str, str]) -> bool:
        """True when every task of the connector has ``config`` (its values as given; a
        config-provider reference, which a worker may show resolved, is not compared): the
        connector took the config and made its tasks' from it.

        Args:
            name: The connector's name.
            config: The config it was given (`put_config`).
        """
        status, payload = self._request("GET", _at(name, "tasks"))
        if status != 200 or not isinstance(payload, list) or not payload:
            return False
        wanted = {k: v for k, v in config.items() if "${" not in v}
        return all(
            all((task.get("config") or {}).get(k) == v for k, v in wanted.items())
            for task in payload
            if isinstance(task, dict)
        )

    def restart(
        self,
        name: str,
        *,
        include_tasks: bool = True,
        only_failed: bool = False,
        wait: float = 30.0,
    ) -> None:
        """Restart the connector (and its tasks; ``only_failed``: only the FAILED ones).

        Args:
            name: The connector's name.
            include_tasks: Restart its tasks too, not only the connector instance.
            only_failed: Restart only what is FAILED.
            wait: Seconds to retry while the cluster is rebalancing (HTTP 409).
        """
        query = f"?includeTasks=true&onlyFailed={str(only_failed).lower()}" if include_tasks else ""
        path = _at(name, "restart") + query
        # 409: the cluster is rebalancing (e.g. after a config update); the request may be retried.
        status = wait_until(
            lambda: self._request("POST", path),
            until=lambda answer: answer[0] != 409,
            timeout=wait,
            what=f"POST {path} to be taken (HTTP 409: the cluster is rebalancing)",
            error=ConnectError,
        )
        if status[0] not in (200, 202, 204):
            raise ConnectError(f"POST {path} -> HTTP {status[0]}: {status[1]}")

    def delete(self, name: str, *, wait: float = 30.0) -> bool:
        """Delete the connector and wait until the cluster no longer lists it; False if absent.

        Args:
            name: The connector's name.
            wait: Seconds to wait for the cluster to apply the delete before raising
                `ConnectError`.
        """
        status, payload = self._request("DELETE", _at(name))
        if status == 404:
            return False
        if status not in (200, 204):
            raise ConnectError(f"DELETE {name} -> HTTP {status}: {payload}")
        # In a distributed cluster the delete is applied through the config topic, asynchronously.
        wait_until(
            lambda: self.status(name) is None,
            timeout=wait,
            poll=0.2,
            what=f"connector {name} to be gone after DELETE",
            error=ConnectError,
        )
        return True
