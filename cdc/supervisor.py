"""Restart a connector's FAILED tasks on their own, with backoff, the way Strimzi's
``autoRestart`` does for the Connect clusters it runs.

Kafka Connect never restarts a FAILED task. With exactly-once source (KIP-618) a task fails
whenever its transaction cannot commit: a partition leader or the transaction coordinator lost
mid-commit (``OperationNotAttemptedException``, ``NotCoordinatorException``), a broker outage
longer than the producer's delivery timeout. Those causes pass, and a restarted task resumes
from its last committed source offset, so the restart loses nothing and repeats at most what
Debezium re-emits on resuming (the inbox's window absorbs it: `inbox.EXACTLY_ONCE_WINDOW`).
Until someone restarts it, though, its replication slot is inactive, holds WAL, and every later
event waits.

`Supervisor.observe` is the decision, one connector status at a time: restart the failed tasks
at once the first time, then after a delay that doubles (``first_delay`` ... ``max_delay``), up
to ``max_restarts`` in a row; a connector that has run for ``stable_after`` seconds since starts
again from the first delay. A cause a restart cannot mend is left FAILED for an operator, with
the way out `cdc.health.diagnose` names: a record over the size limit (`outboxkit cdc
raise-limit`), or a task that failed ``max_restarts`` times in a row.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdc.connect import ConnectClient, ConnectError, ConnectorStatus, wait_for_state
from cdc.health import is_record_too_large
from outboxkit.kernel.retry import Backoff

__all__ = ["RestartPolicy", "Supervisor", "wait_running"]


@dataclass(frozen=True)
class RestartPolicy:
    """When to restart a FAILED task: at once, then after ``first_delay`` seconds doubling to
    ``max_delay``; ``max_restarts`` in a row at most; the count starts again once the
    connector has run ``stable_after`` seconds.

    Attributes:
        first_delay: Seconds before the second restart in a row, doubling after (Connect's
            status topic may still say FAILED a moment after a restart).
        max_delay: The longest wait between two restarts, in seconds.
        max_restarts: Restarts in a row before the task is left FAILED for an operator.
        stable_after: Seconds of RUNNING after which the count starts again.
    """

    first_delay: float = 15.0
    max_delay: float = 300.0
    max_restarts: int = 10
    stable_after: float = 600.0

    def delay(self, restarts: int) -> float:
        """Seconds to wait before restart number ``restarts + 1``.

        Args:
            restarts: The restarts in a row so far.
        """
        if restarts == 0:
            return 0.0
        return Backoff(first=self.first_delay, factor=2.0, cap=self.max_delay).delay(restarts)


@dataclass
class _Track:
    restarts: int = 0
    last_restart: float | None = None
    running_since: float | None = None


@dataclass
class Supervisor:
    """Watch connectors' statuses and restart their FAILED tasks by ``policy``.

    Attributes:
        client: The Kafka Connect cluster's REST client.
        policy: When to restart, and when to give up.
        echo: Told each restart and each error reaching Connect, as a line of text.
        clock: Seconds of a monotonic clock (a test's fake clock).
    """

    client: ConnectClient
    policy: RestartPolicy = field(default_factory=RestartPolicy)
    echo: Callable[[str], Any] = print
    clock: Callable[[], float] = time.monotonic
    _tracks: dict[str, _Track] = field(default_factory=dict)

    def observe(self, status: ConnectorStatus) -> str | None:
        """Act on one status of a connector; returns what was done ("restarted", "gave up",
        "left: record too large") or None when there is nothing to do or not yet.

        Args:
            status: The connector's status just read.
        """
        now = self.clock()
        track = self._tracks.setdefault(status.name, _Track())
        if status.running:
            if track.running_since is None:
                track.running_since = now
            if track.restarts and now - track.running_since >= self.policy.stable_after:
                track.restarts, track.last_restart = 0, None
            return None
        track.running_since = None
        if status.failure is None:
            return None  # starting, rebalancing, paused: not ours to touch
        if is_record_too_large(status):
            return "left: record too large"
        last = now if track.last_restart is None else track.last_restart
        due = last + self.policy.delay(track.restarts)
        if now < due:  # also lets a restart reach the status topic before it is judged
            return None
        if track.restarts >= self.policy.max_restarts:
            return "gave up"
        self.client.restart(status.name, only_failed=True)
        track.restarts += 1
        track.last_restart = now
        self.echo(
            f"connector {status.name}: restarted its failed tasks "
            f"({track.restarts}/{self.policy.max_restarts}): {_cause(status.failure)}"
        )
        return "restarted"

    def check(self, names: Sequence[str] | None = None) -> dict[str, str | None]:
        """One pass over ``names`` (None: every connector of the Connect cluster): each one's
        status read and acted on.

        Args:
            names: The connectors to check; None: every connector of the cluster.
        """
        actions: dict[str, str | None] = {}
        try:
            names = self.client.connectors() if names is None else names
        except ConnectError as exc:  # Connect itself is away: try again on the next pass
            self.echo(str(exc))
            return actions
        for name in names:
            try:
                status = self.client.status(name)
                actions[name] = None if status is None else self.observe(status)
            except ConnectError as exc:
                self.echo(f"connector {name}: {exc}")
                actions[name] = None
        return actions

    def run(
        self,
        names: Sequence[str] | None = None,
        *,
        interval: float = 5.0,
        stop: threading.Event | None = None,
        alive_file: Path | None = None,
    ) -> None:
        """Check ``names`` every ``interval`` seconds until ``stop`` is set; ``alive_file``
        is touched after every pass (a container's health check reads its age).

        Args:
            names: The connectors to watch; None: every connector of the cluster, read at each
                pass.
            interval: Seconds between two passes.
            stop: Set to end the loop; None: run until the process ends.
            alive_file: Touched after every pass (a container's health check reads its age);
                None: none.
        """
        stop = stop or threading.Event()
        while not stop.is_set():
            self.check(names)
            if alive_file is not None:
                alive_file.touch()
            stop.wait(interval)


def _cause(failure: str) -> str:
    """The root cause of a trace: its last "Caused by:" line, else its first line."""
    lines = [line.strip() for line in failure.splitlines() if line.strip()]
    causes = [line.removeprefix("Caused by: ") for line in lines if line.startswith("Caused by:")]
    return (causes[-1] if causes else lines[min(1, len(lines) - 1)])[:200]


def wait_running(
    client: ConnectClient,
    name: str,
    *,
    timeout: float = 180.0,
    policy: RestartPolicy | None = None,
    echo: Callable[[str], Any] = print,
    poll: float = 0.5,
) -> ConnectorStatus:
    """Wait until the connector and all its tasks RUN, restarting failed tasks by ``policy``
    (3 restarts, 10 s apart at first, by default); a failure a restart cannot mend raises
    `ConnectError` with the trace."""
    supervisor = Supervisor(
        client, policy or RestartPolicy(first_delay=10.0, max_restarts=3), echo=echo
    )

    def observed() -> ConnectorStatus | None:
        status = client.status(name)
        if status is not None and not status.running:
            action = supervisor.observe(status)
            if action is not None and action != "restarted":
                raise ConnectError(f"connector {name} failed ({action}):\n{status.failure}")
        return status

    return wait_for_state(observed, name, "RUNNING", timeout=timeout, poll=poll)
