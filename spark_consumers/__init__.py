"""Consumer jobs on Spark Structured Streaming: a `Job` names its topics, handlers and database;
`run_jobs` runs jobs on one driver, each micro-batch applied through the inbox.

`Job`, `load_job` and `ConsumerSettings` import without Spark; the names that need PySpark or
Arrow (`run_jobs`, `start_job`, `build_session`, `SliceSummary`, `ConsumerAudit`) are imported on
first use, so a module that only declares jobs stays light. The audit itself is
`spark_consumers.audit.audit`: a package attribute of the submodule's name would be replaced by
the submodule as soon as it is imported."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

import outboxkit.kernel  # noqa: F401  (first: it refuses packages shadowing the framework's)
from spark_consumers.job import Job, load_job
from spark_consumers.settings import ConsumerSettings

if TYPE_CHECKING:
    from spark_consumers.audit import ConsumerAudit
    from spark_consumers.runner import run_jobs, start_job
    from spark_consumers.session import build_session
    from spark_consumers.summary import SliceSummary

__all__ = [
    "ConsumerAudit",
    "ConsumerSettings",
    "Job",
    "SliceSummary",
    "build_session",
    "load_job",
    "run_jobs",
    "start_job",
]

_LAZY = {
    "ConsumerAudit": "spark_consumers.audit",
    "run_jobs": "spark_consumers.runner",
    "start_job": "spark_consumers.runner",
    "build_session": "spark_consumers.session",
    "SliceSummary": "spark_consumers.summary",
}


def __getattr__(name: str) -> Any:
    """Import the Spark- and Arrow-bound names on first use."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'spark_consumers' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
