"""One real stack per test session (shared by integration, fault and end-to-end tests): embedded,
or external services named by OUTBOXKIT_* settings. The session's stacks and its SparkSession
stop once the last test that uses them has run, not at the session's end: idle, they would take
CPU from the tests after them (and the at-least-once connector relays every outbox event the
later tests write).

Markers are given here, centrally, from where a test lives and which fixtures it reaches:
``integration`` (needs the stack), ``spark`` (starts Spark), ``e2e``, ``faults``; ``slow`` is
set by the tests themselves. Slow campaigns are deselected unless pytest runs with ``--slow``,
whatever ``-m`` selects: ``-m "not integration"`` is the unit tests only. A campaign's short
form (``short_form``) is deselected with ``--slow``, where its full form runs instead."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, pool, text
from sqlalchemy.engine import Engine, make_url

from cdc.preflight import drop_slot
from outboxkit_workshop.devstack.settings import StackSettings
from outboxkit_workshop.devstack.stack import Stack

# Fixtures that start the real stack; a test reaching either (directly or through another
# fixture: ``item.fixturenames`` is the closure) needs Postgres, Kafka and Connect.
STACK_FIXTURES = frozenset({"stack", "at_least_once_stack"})
# Fixtures that start Spark, and modules whose tests start an ``outboxkit consume`` driver.
SPARK_FIXTURES = frozenset({"spark", "saga", "alo_saga"})
SPARK_MODULES = (
    "tests/faults/test_spark_faults.py",
    "tests/integration/test_topic_moves.py",
    "tests/integration/test_partition_add.py",
    "tests/integration/test_mirror_failover.py",
)
# Session fixtures stopped after the last test using them, in this order (a dependent first).
STOPPED_EARLY = ("spark", "at_least_once_stack", "stack")
_running: dict[str, contextlib.ExitStack] = {}  # fixture name -> what stops it
_last_user: dict[str, str] = {}  # fixture name -> node id of the last test using it
_session_stack: list[Stack] = []  # the session's stack while it runs
# Directories whose every test needs the stack, and the marker each one adds.
STACK_DIRS = {
    "tests/integration/": (),
    "tests/e2e/": ("e2e",),
    "tests/faults/": ("faults",),
    "tests/cluster/": ("faults", "cluster"),
}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--slow",
        action="store_true",
        default=False,
        help="also run the tests marked slow (the full fault campaign); without it they are "
        "deselected whatever -m selects",
    )


def pytest_report_header(config: pytest.Config) -> str:
    if config.getoption("--slow"):
        return "slow tests: included (--slow)"
    return "slow tests: deselected (run them with --slow)"


def _relative(item: pytest.Item) -> str:
    """The item's file relative to the repository (``tests/...``), else its absolute path."""
    root = Path(__file__).resolve().parents[1]
    path = item.path.resolve()
    return (path.relative_to(root) if path.is_relative_to(root) else path).as_posix()


@pytest.hookimpl(tryfirst=True)  # before -m is evaluated: it must see these markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = _relative(item)
        names = set(getattr(item, "fixturenames", ()))
        markers: list[str] = []
        for directory, extra in STACK_DIRS.items():
            if path.startswith(directory):
                markers += ["integration", *extra]
        if names & STACK_FIXTURES:
            markers.append("integration")
        if names & SPARK_FIXTURES or path in SPARK_MODULES:
            markers.append("spark")
        for name in dict.fromkeys(markers):
            if item.get_closest_marker(name) is None:
                item.add_marker(name)
    # With --slow, a campaign's short form is left out where its full form runs (not run
    # twice); without it, the slow tests.
    deselect(config, items, "short_form" if config.getoption("--slow") else "slow")


def deselect(config: pytest.Config, items: list[pytest.Item], marker: str) -> None:
    """Leave out the items marked ``marker``, reported as deselected."""
    marked = [item for item in items if item.get_closest_marker(marker) is not None]
    if marked:
        config.hook.pytest_deselected(items=marked)
        items[:] = [item for item in items if item.get_closest_marker(marker) is None]


def pytest_collection_finish(session: pytest.Session) -> None:
    """Note the last test (in run order, after deselection) that uses each STOPPED_EARLY fixture."""
    _last_user.clear()
    for item in session.items:
        for name in STOPPED_EARLY:
            if name in getattr(item, "fixturenames", ()):
                _last_user[name] = item.nodeid


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """After the last test using a STOPPED_EARLY fixture (its own fixtures torn down), stop it."""
    yield
    for name in STOPPED_EARLY:
        if _last_user.get(name) == item.nodeid and name in _running:
            _running.pop(name).close()


@contextlib.contextmanager
def stopped_early(name: str) -> Iterator[contextlib.ExitStack]:
    """An exit stack for fixture ``name``'s resources, closed after its last test or, at the
    latest, when the fixture is torn down."""
    with contextlib.ExitStack() as resources:
        _running[name] = resources
        try:
            yield resources
        finally:
            _running.pop(name, None)


@contextlib.contextmanager
def temporary_stack(prefix: str, label: str, **settings: Any) -> Iterator[Stack]:
    """A stack in its own directory, up for the block, then down (slots dropped) and removed."""
    # The postgres user must be able to enter the directory: not under pytest's 0700 tmp.
    base = Path(tempfile.mkdtemp(prefix=prefix))
    base.chmod(0o755)
    stack = Stack(
        StackSettings(stack_dir=base / "stack", heartbeat_interval_ms=2000, **settings),
        echo=lambda line: print(f"[{label}] {line}"),
    )
    try:
        stack.up()
        yield stack
    finally:
        stack.down()
        if not os.environ.get("OUTBOXKIT_KEEP_TEST_STACK"):
            shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def stack() -> Iterator[Stack]:
    with stopped_early("stack") as resources:
        embedded = resources.enter_context(
            temporary_stack("outboxkit-it-", "stack", connector_name=f"it-{uuid.uuid4().hex[:6]}")
        )
        _session_stack.append(embedded)
        resources.callback(_session_stack.clear)  # before the stack stops
        yield embedded


def running_session_stack() -> Stack | None:
    """The session's stack if it runs (started by a test, not stopped yet)."""
    return _session_stack[0] if _session_stack else None


def forget_offsets(connect_url: str, name: str) -> None:
    """Stop connector ``name`` and delete its stored offsets (KIP-875) before it is deleted: its
    slot is dropped with it, and a later test registering a connector of the same name (the
    saga's, a service's) must start from its new slot, not from an offset the slot never had."""
    import httpx

    with httpx.Client(base_url=connect_url, timeout=30) as http:
        if http.put(f"/connectors/{name}/stop").status_code not in (200, 202, 204):
            return
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            state = http.get(f"/connectors/{name}/status").json().get("connector", {}).get("state")
            if state == "STOPPED":
                break
            time.sleep(0.2)
        http.delete(f"/connectors/{name}/offsets")


def remove_added_connectors(stack: Stack) -> None:
    """Delete every connector on ``stack`` but its own (those `Stack.add_service` registered
    for the services of a test or the saga) and drop their slots: idle, their tasks take CPU,
    and every later Connect restart restarts them too."""
    state = stack.state
    client = stack.connect_client()
    for name in state.connectors:
        if name != stack.settings.connector_name:
            forget_offsets(stack.connect_url(), name)
            client.delete(name)
    engine = create_engine(stack.database_url(), poolclass=pool.NullPool)
    exists = text("SELECT 1 FROM pg_replication_slots WHERE slot_name = :s")
    try:
        for slot in state.slots:
            deadline = time.monotonic() + 15  # the walsender may take a moment to let it go
            while slot != stack.settings.slot_name:
                try:
                    with engine.begin() as conn:
                        if conn.execute(exists, {"s": slot}).first() is not None:
                            drop_slot(conn, slot)
                    break
                except Exception:  # still active: try again until the deadline
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
    finally:
        engine.dispose()
    state.connectors = [c for c in state.connectors if c == stack.settings.connector_name]
    state.slots = [slot for slot in state.slots if slot == stack.settings.slot_name]
    state.save(stack.state_file)  # `down` would find them gone; publications it still drops


@pytest.fixture(scope="session")
def at_least_once_stack(stack: Stack) -> Iterator[Stack]:
    """A second Connect worker with exactly-once source off, on the same Postgres and broker,
    relaying the same outbox table to its own topics (prefix ``alo.``)."""
    tag = uuid.uuid4().hex[:6]
    with stopped_early("at_least_once_stack") as resources:
        yield resources.enter_context(
            temporary_stack(
                "outboxkit-alo-",
                "alo stack",
                database_url=stack.database_url(),
                secrets_dir=stack.secrets.dir,  # one Postgres cluster, one set of role passwords
                kafka_bootstrap_servers=stack.bootstrap_servers(),
                connect_exactly_once=False,
                connector_name=f"it-alo-{tag}",
                server_name=f"alo_{tag}",
                slot_name=f"it_alo_{tag}",
                publication_name=f"it_alo_{tag}",
                topic_prefix="alo.event.",
            )
        )


@pytest.fixture(scope="session")
def engine(stack: Stack) -> Iterator[Engine]:
    # pre_ping: a test that crashed Postgres (a fault campaign) leaves dead connections in the
    # pool, which the next test using it would be handed.
    eng = create_engine(stack.database_url(), pool_size=8, pool_pre_ping=True)
    yield eng
    eng.dispose()


@pytest.fixture
def empty_database(stack: Stack) -> Iterator[str]:
    """The URL of a new, empty database on the stack's Postgres, dropped afterwards."""
    url = make_url(stack.database_url())
    name = f"empty_{uuid.uuid4().hex[:8]}"
    server = create_engine(url.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with server.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    yield url.set(database=name).render_as_string(hide_password=False)
    with server.connect() as conn:
        conn.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
    server.dispose()


@pytest.fixture
def aggregate_type() -> str:
    """A fresh aggregate type, so each test reads its own topic."""
    return f"it_{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def spark(stack: Stack) -> Iterator[object]:
    """One SparkSession for the consumer tests (local[2], loopback)."""
    import os

    # Executors import the test jobs by reference: put the repository on their path.
    root = str(Path(__file__).resolve().parents[2])
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    from outboxkit_workshop.devstack.artifacts import cached_spark_jars
    from spark_consumers.session import build_session

    with stopped_early("spark") as resources:
        session = build_session("outboxkit-tests", jars=cached_spark_jars(stack.settings.cache_dir))
        resources.callback(session.stop)
        yield session


@pytest.fixture(scope="session")
def spark_effects_table(engine: Engine) -> None:
    from tests.jobs import metadata

    metadata.create_all(engine)
