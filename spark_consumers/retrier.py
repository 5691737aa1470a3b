"""The consumer driver's retrier: about every second, each job's inbox redrives its parked
records whose delayed retry is due (`inbox.retry_due`), on a thread of its own, so a slow
handler or an unreachable database never holds up the supervision of the queries. Two
retriers at once (two drivers, or `outboxkit inbox retry` beside one) are safe: each partition
is redriven under its watermark lock, and what one did is no longer due for the other."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from sqlalchemy.engine import Engine

from inbox import Inbox, RedriveResult, retry_due
from outboxkit.kernel.errors import is_transient
from spark_consumers.job import Job

log = logging.getLogger("outboxkit.consumers")

RETRY_POLL_SECONDS = 1.0  # between passes: a due record waits at most this beyond its time
ERROR_PAUSE = 30.0  # the longest wait after failing passes (an outage, a missing migration)


class Retrier:
    """Runs `inbox.retry_due` for every job with delayed retries on, in a background thread,
    until stopped.

    Args:
        jobs: The jobs whose inboxes are retried (those with ``retry.attempts`` 0 are left out).
        poll: Seconds between passes.
    """

    def __init__(self, jobs: Sequence[Job], poll: float = RETRY_POLL_SECONDS) -> None:
        self.poll = poll
        self._engines: dict[str, Engine] = {}
        self.inboxes = [job.inbox(self._engine(job)) for job in jobs if job.retry.enabled]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="outboxkit-retrier", daemon=True)

    def _engine(self, job: Job) -> Engine:
        """One small engine per database of the jobs."""
        url = job.engine_url()
        name = url.render_as_string(hide_password=True)
        if name not in self._engines:
            self._engines[name] = job.engine(pool_size=1)
        return self._engines[name]

    def start(self) -> Retrier:
        """Start the thread (nothing when no job retries later)."""
        if self.inboxes:
            self._thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Stop after the pass under way (its transaction commits or rolls back)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        for engine in self._engines.values():
            engine.dispose()

    def run_once(self) -> RedriveResult:
        """One pass over every inbox (what the thread runs each time)."""
        total = RedriveResult(0, 0, 0)
        for inbox in self.inboxes:
            done = retry_due(inbox)
            if done.applied or done.skipped or done.still_parked:
                _report(inbox, done)
            total += done
        return total

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception as exc:  # logged, tried again: the records wait parked meanwhile
                failures += 1
                if is_transient(exc):
                    log.warning("retrying parked records: %s", str(exc).splitlines()[0])
                elif failures == 1:
                    log.exception("retrying parked records failed")
                self._stop.wait(min(ERROR_PAUSE, self.poll * 2 ** min(failures, 10)))
                continue
            failures = 0
            self._stop.wait(self.poll)


def _report(inbox: Inbox, done: RedriveResult) -> None:
    log.info(
        "%s: delayed retries: %d applied, %d already applied, %d still parked (%d to retry)",
        inbox.consumer,
        done.applied,
        done.skipped,
        done.still_parked,
        done.retrying,
    )
