"""The consumer driver's releasers of scheduled messages: one per database its jobs write to,
releasing through that job's outbox, so the messages the handlers schedule are released where
the consumers already run (beside, or instead of, the services' own releasers: one at a time
releases, by a lock in the database)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from outbox.scheduled import Releaser
from outbox.settings import ReleaseSettings
from outboxkit.kernel.engines import engine_for
from spark_consumers.job import Job


@contextlib.contextmanager
def releasing(
    jobs: Sequence[Job], settings: ReleaseSettings | None = None, registry: Any = None
) -> Iterator[list[Releaser]]:
    """Run a releaser per distinct database of ``jobs`` while the block runs (none when
    ``settings`` disables them); with a Prometheus ``registry``, their metrics go there."""
    settings = settings or ReleaseSettings()
    started: list[Releaser] = []
    engines = []
    try:
        seen: set[str] = set()
        for job in jobs:
            url = job.engine_url()
            name = url.render_as_string(hide_password=True)
            if name in seen or not settings.enabled:
                continue
            seen.add(name)
            engine = engine_for(url, "consumer", pool_size=1)
            engines.append(engine)
            on_release = None
            if registry is not None:
                from outbox.metrics import ReleaseMetrics

                on_release = ReleaseMetrics(registry, engine).released
            releaser = settings.releaser(engine, job.outbox, on_release)
            if releaser is not None:
                started.append(releaser.start())
        yield started
    finally:
        for releaser in started:
            releaser.stop()
        for engine in engines:
            engine.dispose()
