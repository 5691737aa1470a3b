"""The consumer driver's releasers of scheduled messages: one per database its jobs write to,
releasing through that job's outbox, so the messages the handlers schedule are released where
the consumers already run (beside, or instead of, the services' own releasers: one at a time
releases, by a lock in the database)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from sqlalchemy.engine import Engine

from outbox.scheduled import Releaser
from outbox.settings import ReleaseSettings
from spark_consumers.job import Job


@contextlib.contextmanager
def releasing(
    jobs: Sequence[Job], settings: ReleaseSettings | None = None, registry: Any = None
) -> Iterator[list[Releaser]]:
    """Run a releaser per distinct database of ``jobs`` while the block runs (none when
    ``settings`` disables them); with a Prometheus ``registry``, their metrics go there."""
    settings = settings or ReleaseSettings()
    started: list[Releaser] = []
    engines: dict[str, tuple[Engine, Job]] = {}
    for job in jobs if settings.enabled else ():
        url = job.engine_url()
        name = url.database or url.render_as_string(hide_password=True)
        if name not in engines:
            engines[name] = (job.engine(pool_size=1), job)
    try:
        on_release = None
        if registry is not None and engines:
            from outbox.metrics import ReleaseMetrics

            metrics = ReleaseMetrics(registry, {n: e for n, (e, _) in engines.items()})
            on_release = metrics.released
        for engine, job in engines.values():
            releaser = settings.releaser(engine, job.outbox, on_release)
            if releaser is not None:
                started.append(releaser.start())
        yield started
    finally:
        for releaser in started:
            releaser.stop()
        for engine, _ in engines.values():
            engine.dispose()
