"""The operator commands' fallback to the local dev stack: `cdc.endpoints.resolve` asks it for
each endpoint the settings leave unset, and it answers from the stack's state file (what
`outboxkit dev stack up` recorded), never by building the dev stack. The consumer driver's jars fall
back to the stack's download cache the same way."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.engine import make_url

from cdc import endpoints
from cdc.endpoints import EndpointSettings, Recorded
from outboxkit.devstack.connect import live_url
from outboxkit.devstack.state import StackState
from outboxkit.settings import Settings


def recorded_by_stack(settings: EndpointSettings) -> Recorded | None:
    """The endpoints in the state file of ``settings.stack_dir`` (None: no stack recorded)."""
    state_file = settings.stack_dir.resolve() / "state.json"
    state = StackState.load(state_file)
    if state is None:
        return None
    return Recorded(
        origin=str(state_file),
        database=make_url(state.postgres.endpoint) if state.postgres.endpoint else None,
        bootstrap_servers=state.broker.endpoint or None,
        connect_url=live_url(state) or None,
    )


def resolve(settings: EndpointSettings) -> endpoints.Endpoints:
    """Each endpoint from ``settings``, else from the local stack's state file."""
    return endpoints.resolve(settings, fallback=recorded_by_stack)


def spark_jars(settings: Settings) -> list[Path]:
    """The jars a consumer driver hands Spark: the settings', else the local stack's cache's
    (none when neither has them: the cluster's classpath or spark-submit provides them)."""
    if settings.spark_jars:
        return list(settings.spark_jars)
    from outboxkit.devstack.artifacts import cached_spark_jars
    from outboxkit.devstack.settings import default_cache_dir

    return cached_spark_jars(settings.cache_dir or default_cache_dir())
