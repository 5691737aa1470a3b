"""The operator commands' fallback to the local dev stack, registered with the framework through
the ``outboxkit.local_stack`` entry point: the endpoints the stack's state file records (what
`outboxkit dev stack up` wrote), never by building the dev stack, and the Spark jars its download
cache holds."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.engine import make_url

from cdc.endpoints import EndpointSettings, Recorded
from outboxkit_workshop.devstack.artifacts import cached_spark_jars
from outboxkit_workshop.devstack.connect import live_url
from outboxkit_workshop.devstack.settings import default_cache_dir
from outboxkit_workshop.devstack.state import StackState

# The repository the workshop is installed from: its dev stack, wherever the command runs.
REPOSITORY = Path(__file__).resolve().parents[2]


def recorded(settings: EndpointSettings) -> Recorded | None:
    """The endpoints in the state file of ``settings.stack_dir`` (None: no stack recorded); a
    relative stack_dir is looked for in the current folder, then in the repository's."""
    state_file = state_file_of(settings.stack_dir)
    state = StackState.load(state_file)
    if state is None:
        return None
    return Recorded(
        origin=str(state_file),
        database=make_url(state.postgres.endpoint) if state.postgres.endpoint else None,
        bootstrap_servers=state.broker.endpoint or None,
        connect_url=live_url(state) or None,
    )


def state_file_of(stack_dir: Path) -> Path:
    """The state file a stack directory holds: here, else (relative) the repository's."""
    here = stack_dir.resolve() / "state.json"
    if here.exists() or stack_dir.is_absolute():
        return here
    return REPOSITORY / stack_dir / "state.json"


def spark_jars(cache_dir: Path | None) -> list[Path]:
    """Spark's Kafka connector from the stack's download cache (empty: not installed there)."""
    return cached_spark_jars(cache_dir or default_cache_dir())
