"""`outboxkit dev stack status`: every component's mode, nodes and health, the broker's and
Connect's versions, each connector's state (with the diagnosis of a failed one) and each slot's
lag, read from the stack's state file and the running engines."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from cdc.connect import ConnectError
from cdc.preflight import slot_lag
from cdc.recovery import diagnose_connector
from outboxkit.kernel.engines import engine_for
from outboxkit_workshop.devstack import artifacts
from outboxkit_workshop.devstack.connectors import StackView
from outboxkit_workshop.devstack.network import address_of
from outboxkit_workshop.devstack.processes import alive, port_open
from outboxkit_workshop.devstack.state import EMBEDDED, EXTERNAL, Component, StackState


def report(stack: StackView) -> dict[str, Any]:
    """Each component's mode, state and endpoint, plus the connector and slot."""
    state = StackState.load(stack.state_file)
    if state is None:
        return {"up": False, "stack_dir": str(stack.dir)}
    report: dict[str, Any] = {"up": True, "stack_dir": str(stack.dir)}
    for name in ("postgres", "broker", "connect", "spark"):
        comp: Component = getattr(state, name)
        running = all(alive(n.pid) for n in comp.nodes) if comp.mode == EMBEDDED else None
        report[name] = {**asdict(comp), "pid": comp.pid, "port": comp.port, "running": running}
    report["nodes"] = nodes(state)
    report["broker"]["product"] = _broker_product(stack, state)
    report["connect"]["product"] = _connect_product(stack, state)
    report["database_url"] = state.postgres.endpoint
    report["bootstrap_servers"] = state.broker.endpoint
    report["connect_url"] = stack.connect_url(state)
    report["connectors"], report["failures"] = _connector_report(stack, state)
    report["slots"] = _slot_report(state)
    report["up"] = all(
        report[n]["running"] is not False for n in ("postgres", "broker", "connect", "spark")
    )
    return report


def nodes(state: StackState) -> list[dict[str, Any]]:
    """Every process of the embedded engines: name, role, PID, endpoint and health
    (``up``: it runs and answers on its port; ``down``: it runs not)."""
    rows = []
    for engine in ("postgres", "broker", "connect", "spark"):
        component: Component = getattr(state, engine)
        for node in component.nodes if component.mode == EMBEDDED else []:
            running = alive(node.pid)
            address = address_of(state.network, node.name)
            answers = running and node.port is not None and port_open(node.port, address)
            health = "up" if answers else ("starting" if running else "down")
            rows.append({"engine": engine, **asdict(node), "health": health})
    return rows


def _connector_report(stack: StackView, state: StackState) -> tuple[dict[str, str], dict[str, Any]]:
    """Each connector's state (FAILED when a task failed, though Connect says the connector
    RUNS) and, for a failed one, the reason and the way out."""
    client = stack.connect_client(stack.connect_url(state), timeout=5)
    states: dict[str, str] = {}
    failures: dict[str, Any] = {}
    for name in state.connectors:
        try:
            st = client.status(name)
            diagnosis = (
                diagnose_connector(
                    client,
                    name,
                    database_url=state.postgres.endpoint,
                    bootstrap_servers=state.broker.endpoint,
                    status=st,
                )
                if st is not None and st.failure
                else None
            )
        except ConnectError as exc:
            states[name] = f"UNREACHABLE: {exc}"
            continue
        if diagnosis:
            states[name], failures[name] = "FAILED", diagnosis.as_dict()
        else:
            states[name] = st.state if st else "ABSENT"
    return states, failures


def _broker_product(stack: StackView, state: StackState) -> dict[str, Any]:
    """What the broker is: Apache Kafka, with its version when this stack runs it."""
    version = (
        "external"
        if state.broker.mode == EXTERNAL
        else artifacts.running_version(stack.settings.cache_dir, "broker")
    )
    return {"name": "Apache Kafka", "version": version}


def _connect_product(stack: StackView, state: StackState) -> dict[str, Any]:
    """Connect's version (from its REST API) and whether it runs exactly-once source."""
    try:
        version = stack.connect_client(stack.connect_url(state), timeout=5).version()
    except ConnectError as exc:
        version = f"unreachable: {exc}"
    return {
        "name": "Apache Kafka Connect",
        "version": version,
        "exactly_once_source": stack.settings.connect_exactly_once,
        "debezium": artifacts.running_version(stack.settings.cache_dir, "connect"),
    }


def _slot_report(state: StackState) -> dict[str, Any]:
    slots: dict[str, Any] = {}
    try:
        engine = engine_for(state.postgres.endpoint, "once")
        with engine.connect() as conn:
            for slot in state.slots:
                lag = slot_lag(conn, slot)
                slots[slot] = (
                    None if lag is None else {"active": lag.active, "lag_bytes": lag.lag_bytes}
                )
        engine.dispose()
    except Exception as exc:
        slots["error"] = str(exc).splitlines()[0]
    return slots
