"""The connector supervisor beside the embedded stack, as a deployment runs it (`outboxkit cdc
supervise`, the ``cdc-supervisor`` of deploy/): Kafka Connect never restarts a FAILED task, and
with exactly-once source a task fails whenever a broker, a coordinator or a link is lost while it
commits (`cdc.supervisor`). Fault campaigns, soaks and the cluster tests run it so that such a
failure is mended as in production, not left for an operator."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from cdc.supervisor import RestartPolicy, Supervisor
from outboxkit_workshop.devstack.stack import Stack

# How often it looks at the connectors' status, seconds, and when it restarts a failed task: at
# once, then after 5 s doubling (a campaign's faults pass in seconds).
POLL_SECONDS = 2.0
POLICY = RestartPolicy(first_delay=5.0)


@contextmanager
def supervised(
    stack: Stack,
    *,
    echo: Callable[[str], None] = print,
    policy: RestartPolicy = POLICY,
) -> Iterator[Supervisor]:
    """Every connector of ``stack`` supervised for the block, on a thread. It asks whichever
    Connect worker runs, as a load balancer in front of the workers would."""
    supervisor = Supervisor(stack.connect_client(), policy, echo=lambda s: echo(f"[sup] {s}"))
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(POLL_SECONDS):
            try:
                url = stack.connect_url()
                if not url:  # `stack up` is starting the workers again
                    continue
                supervisor.client = stack.connect_client(url)
                supervisor.check(stack.state.connectors)
            except Exception as exc:  # a worker or the state file mid-change: next pass
                echo(f"[sup] {exc!r}")

    thread = threading.Thread(target=run, name="connector-supervisor", daemon=True)
    thread.start()
    try:
        yield supervisor
    finally:
        stop.set()
        thread.join(timeout=10)
