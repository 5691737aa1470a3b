"""The operator commands' endpoints: each from the settings, else from a local stack when one is
installed and recorded. A distribution offers a local stack through the ``outboxkit.local_stack``
entry point (the repository's workshop offers its dev stack): a module with
``recorded(settings) -> cdc.endpoints.Recorded | None`` and ``spark_jars(cache_dir) -> list``.
Without one, nothing falls back: every endpoint comes from the settings."""

from __future__ import annotations

from functools import cache
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType

from cdc import endpoints
from cdc.endpoints import EndpointSettings, Recorded
from outboxkit.settings import Settings

LOCAL_STACK = "outboxkit.local_stack"


@cache
def local_stack() -> ModuleType | None:
    """The installed local stack's module (None: no distribution offers one)."""
    for entry in entry_points(group=LOCAL_STACK):
        module: ModuleType = entry.load()
        return module
    return None


def recorded_by_stack(settings: EndpointSettings) -> Recorded | None:
    """The endpoints a local stack recorded (None: no local stack installed, or none recorded)."""
    stack = local_stack()
    return None if stack is None else stack.recorded(settings)


def resolve(settings: EndpointSettings, *, fallback: bool = True) -> endpoints.Endpoints:
    """Each endpoint from ``settings``, else (with ``fallback``) from the local stack's record."""
    return endpoints.resolve(settings, fallback=recorded_by_stack if fallback else None)


def spark_jars(settings: Settings) -> list[Path]:
    """The jars a consumer driver hands Spark: the settings', else a local stack's cache's
    (none when neither has them: the cluster's classpath or spark-submit provides them)."""
    if settings.spark_jars:
        return list(settings.spark_jars)
    stack = local_stack()
    return [] if stack is None else list(stack.spark_jars(settings.cache_dir))
