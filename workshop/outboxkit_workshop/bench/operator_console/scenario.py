"""The scenario, step by step: the setting made, the console built as `outboxkit console` builds
it and timed in this process, then started in a process of its own and left alone; the topic
deleted whatever happened."""

from __future__ import annotations

import contextlib
import secrets
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import make_url

from outboxkit_workshop.bench.operator_console.idle import idle, job_module
from outboxkit_workshop.bench.operator_console.measure import (
    Measured,
    Statements,
    heads_of,
    interleaved,
    overview_parts,
)
from outboxkit_workshop.bench.operator_console.results import checks, results, summarise
from outboxkit_workshop.bench.operator_console.seed import (
    CONSUMER,
    ERRORS,
    JOB_NAME,
    Setting,
    delete_topic,
    produce,
    records_per_partition,
    seed,
)
from outboxkit_workshop.bench.operator_console.served import USER, page, serve, signed_in
from outboxkit_workshop.bench.report import Progress, machine
from outboxkit_workshop.bench.usage import Watch
from outboxkit_workshop.devstack.stack import Stack

if TYPE_CHECKING:
    from cdc.endpoints import Endpoints
    from outboxkit.console import Console
    from spark_consumers.job import Job

PARKED = 100_000
PARTITIONS = 64
SAMPLES = 30
WARM_UP = 3
IDLE_SECONDS = 30.0
TARGET_MS = 200.0  # the overview answers under this, at its p95
IDLE_TARGET_PERCENT = 1.0  # "no load when nobody looks": under this share of one core
SLOW_MS = 20.0  # statements at least this slow at their median are explained
READ = "OverviewReader.read()"
PAGES = ("GET /", "GET /failures", "GET /failures/group", "GET /events?id=")


@dataclass(frozen=True)
class Plan:
    """What a run measures: ``parked`` records over ``partitions`` partitions, each path
    ``samples`` times after ``warm_up`` untimed, the console left alone ``idle_seconds``, the
    statements of ``slow_ms`` or more at their median explained."""

    parked: int
    partitions: int
    samples: int
    warm_up: int
    idle_seconds: float
    slow_ms: float

    @property
    def records(self) -> int:
        """Records on each partition of the topic."""
        return records_per_partition(self.parked, self.partitions)

    @property
    def steps(self) -> float:
        """The progress's total: the two seeding steps, every call, the idle seconds."""
        calls = (self.warm_up + self.samples) * (1 + len(PAGES)) + 5 * (1 + self.samples)
        return 2 + calls + self.idle_seconds


@dataclass(frozen=True)
class Rig:
    """Where the console runs: the benchmark's database (``url``), the stack's (the outbox
    side), its Kafka and Connect, the run's topic, and a folder for the run's files (the users
    file, with the benchmark user's ``password``)."""

    url: str
    outbox_url: str
    bootstrap: str
    connect_url: str
    topic: str
    folder: Path
    password: str

    @property
    def kafka(self) -> dict[str, Any]:
        """The Kafka clients' configuration."""
        return {"bootstrap.servers": self.bootstrap}

    @property
    def users(self) -> Path:
        """The console's users file."""
        return self.folder / "users"


def run(
    stack: Stack,
    url: str,
    out: Path,
    *,
    parked: int = PARKED,
    partitions: int = PARTITIONS,
    samples: int = SAMPLES,
    warm_up: int = WARM_UP,
    idle_seconds: float = IDLE_SECONDS,
    slow_ms: float = SLOW_MS,
) -> tuple[dict[str, Any], str]:
    """The console over ``parked`` records on ``partitions`` partitions in the database ``url``
    (fresh: migrated here), with the stack's Kafka, Connect and database."""
    plan = Plan(parked, partitions, samples, warm_up, idle_seconds, slow_ms)
    bootstrap = stack.bootstrap_servers()
    topic = f"bench.console.{uuid.uuid4().hex[:8]}"
    connect_url, outbox_url = stack.connect_url(), stack.database_url()
    password = secrets.token_urlsafe(16)
    with (
        tempfile.TemporaryDirectory(prefix="outboxkit-bench-console-") as workdir,
        Progress("console", plan.steps) as progress,
    ):
        rig = Rig(url, outbox_url, bootstrap, connect_url, topic, Path(workdir), password)
        _write_users(rig)
        try:
            setting = _seeded(rig, plan, progress)
            measured = _measured(stack, rig, plan, setting, progress)
            checked = checks(measured.last, setting, parked, partitions)
            quiet = _left_alone(rig, idle_seconds, progress)
        finally:
            delete_topic(rig.kafka, topic)
    found = machine(url)
    data = results(_params(plan, setting), found, setting, measured, checked, quiet)
    return data, summarise(data)


def _write_users(rig: Rig) -> None:
    """The console's users file: the benchmark's user, a viewer."""
    from outboxkit.console.auth import user_line

    rig.users.write_text(user_line(USER, "viewer", rig.password) + "\n")
    rig.users.chmod(0o600)


def _seeded(rig: Rig, plan: Plan, progress: Progress) -> Setting:
    """The records on Kafka, then the consumer's watermarks and parked records."""
    progress.update(f"console: {plan.partitions} partitions x {plan.records:,} records on Kafka")
    produce(rig.kafka, rig.topic, plan.partitions, plan.records)
    progress.advance(1)
    progress.update(f"console: {plan.parked:,} parked records, {len(ERRORS)} causes")
    setting = seed(rig.url, rig.topic, plan.parked, plan.partitions, plan.records)
    progress.advance(1)
    return setting


def _measured(stack: Stack, rig: Rig, plan: Plan, setting: Setting, progress: Progress) -> Measured:
    """The console in this process: its paths timed in turns, then the overview's parts, every
    statement timed; the slow ones explained."""
    console, job, endpoints = _console(stack, rig)
    statements = Statements(console.engines)
    try:
        with statements.attached(), Watch() as load:
            progress.update("console: the overview's read and the pages, signed in")
            ms, heads = _paths(console, rig, setting, statements, plan, progress.advance)
            last = console.reader.read()
            progress.update("console: the overview's parts")
            parts = overview_parts(console, job, endpoints, plan.samples, progress.advance)
        progress.update("console: explaining the slow statements")
        plans = statements.explain(plan.slow_ms)
    finally:
        console.close()
    return Measured(ms, parts, heads, last, statements, plans, load)


def _console(stack: Stack, rig: Rig) -> tuple[Console, Job, Endpoints]:
    """The console as `outboxkit console` builds it (the job; the stack's database for the
    outbox side, its Kafka and Connect), with the overview's cache off."""
    from cdc.endpoints import Endpoints
    from outboxkit.console import build_console
    from outboxkit.kernel.kafka.security import PLAINTEXT
    from outboxkit.settings import Settings
    from spark_consumers.job import Job

    job = Job(
        name=JOB_NAME,
        topics=(rig.topic,),
        consumer=CONSUMER,
        handlers={"Charge": _never},
        database_url=rig.url,
        bootstrap_servers=rig.bootstrap,
    )
    endpoints = Endpoints(
        make_url(rig.outbox_url),
        rig.bootstrap,
        rig.connect_url,
        PLAINTEXT,
        connect_auth=stack.settings.connect_auth(),
    )
    console = build_console(Settings(console_users_file=rig.users), [job], endpoints)
    console.reader.fresh = 0.0  # every read a read
    return console, job, endpoints


def _never(envelope: Any, uow: Any) -> None:
    raise ValueError("the console benchmark applies nothing")


def _paths(
    console: Console,
    rig: Rig,
    setting: Setting,
    statements: Statements,
    plan: Plan,
    advance: Callable[[float], None],
) -> tuple[dict[str, list[float]], list[int]]:
    """The overview's read and the pages (served by uvicorn to one signed-in client), taking
    turns; with the partitions behind whose head time each read had."""
    heads: list[int] = []  # partitions behind whose head time a read has

    def overview() -> None:
        view = console.reader.read()
        heads.append(sum(len(heads_of(c)) for c in view.consumers))

    served = serve(console.app)
    try:
        with contextlib.closing(signed_in(served.url, rig.password)) as client:
            calls = {READ: overview, **_pages(client, rig.topic, setting)}
            ms = interleaved(calls, plan.samples, plan.warm_up, statements, advance)
    finally:
        served.stop()
    return ms, heads


def _pages(client: Any, topic: str, setting: Setting) -> dict[str, Callable[[], None]]:
    """Each page asked for, with what it must show: the overview, the failures, the largest
    group's page and the search for a parked record's event id."""
    group = {"consumer": CONSUMER, "cause": setting.cause}
    return {
        PAGES[0]: lambda: page(client, "/", shows=CONSUMER),
        PAGES[1]: lambda: page(client, "/failures", shows="grouped by cause"),
        PAGES[2]: lambda: page(client, "/failures/group", group, shows="<tbody"),
        PAGES[3]: lambda: page(client, "/events", {"id": setting.event_id}, shows=topic),
    }


def _left_alone(rig: Rig, seconds: float, progress: Progress) -> dict[str, Any]:
    """`outboxkit console` in a process of its own, on the same job and settings, left alone."""
    progress.update(f"console: `outboxkit console` left alone for {seconds:g} s")
    job_module(rig.folder, rig.url, rig.bootstrap, rig.topic)
    env = {
        "OUTBOXKIT_CONSOLE_USERS_FILE": str(rig.users),
        "OUTBOXKIT_DATABASE_URL": rig.outbox_url,
        "OUTBOXKIT_KAFKA_BOOTSTRAP_SERVERS": rig.bootstrap,
        "OUTBOXKIT_CONNECT_URL": rig.connect_url,
    }
    return idle(rig.folder, env, rig.url, rig.password, seconds, progress.advance)


def _params(plan: Plan, setting: Setting) -> dict[str, Any]:
    """The run's parameters, with what was seeded and the targets."""
    return {
        "parked": plan.parked,
        "partitions": plan.partitions,
        "records_per_partition": plan.records,
        "lagging_partitions": setting.lagging,
        "causes": setting.causes,
        "retrying": setting.retrying,
        "samples": plan.samples,
        "warm_up": plan.warm_up,
        "idle_seconds": plan.idle_seconds,
        "connect": True,
        "target_ms": TARGET_MS,
        "idle_target_percent": IDLE_TARGET_PERCENT,
        "slow_ms": plan.slow_ms,
    }
