"""A consumer job: which topics, which consumer name, which handlers, which database."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from inbox.apply import Handler


@dataclass(frozen=True)
class Job:
    """Everything `outboxkit consume` needs to run one consumer."""

    name: str
    topics: tuple[str, ...]
    consumer: str
    handlers: Mapping[str, Handler] | Handler
    database_url: str
    bootstrap_servers: str
    max_attempts: int = 3
    window: int = 50_000
    max_offsets_per_trigger: int = 200_000
    kafka_options: Mapping[str, str] = field(default_factory=dict)


def load_job(spec: str) -> Job:
    """Resolve ``module:attr`` to a Job (attr may be a Job or a zero-argument factory)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(
            f"job {spec!r}: write it as module:attribute, e.g. myservice.jobs:payments"
        )
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"job {spec!r} cannot be loaded: {exc}") from exc
    job = target() if callable(target) and not isinstance(target, Job) else target
    if not isinstance(job, Job):
        raise ValueError(f"job {spec!r} is a {type(job).__name__}, not a spark_consumers.Job")
    return job


JobFactory = Callable[[], Job]
