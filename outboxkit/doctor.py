"""`outboxkit doctor`'s checks: is everything the pipeline needs where the settings say, and as
`outboxkit db upgrade`, `cdc prepare` and `cdc apply` would leave it? Each check gives findings,
one line each with its fix; a check whose prerequisite failed is skipped, saying which."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import make_url

from cdc.connect import ConnectClient
from cdc.endpoints import Endpoints
from outboxkit.commands.errors import FRAMEWORK
from outboxkit.settings import Settings


@dataclass(frozen=True)
class Finding:
    """One thing checked: whether it is right, what was seen, and (when wrong) what to do."""

    check: str
    ok: bool | None  # None: skipped, its prerequisite failed
    detail: str
    fix: str = ""
    warning: bool = False  # not a failure here: something a deployment may provide elsewhere

    def line(self) -> str:
        """The finding as one line (its fix after a dash)."""
        mark = "warn" if self.warning else {True: "ok", False: "FAIL", None: "skip"}[self.ok]
        return f"[{mark}] {self.check}: {self.detail}" + (f" -- {self.fix}" if self.fix else "")

    def as_dict(self) -> dict[str, Any]:
        """The finding as JSON-ready data."""
        return asdict(self)


@dataclass
class Examination:
    """What the checks share: the settings, the endpoints (resolved when a check first needs
    them: a secret file that cannot be read is that check's finding, not the end of the run),
    the jobs named, and what has failed."""

    settings: Settings
    resolver: Callable[[], Endpoints]
    jobs: Sequence[Any] = ()
    failed: set[str] = field(default_factory=set)
    _endpoints: Endpoints | None = None

    @property
    def endpoints(self) -> Endpoints:
        """The resolved endpoints (resolved once)."""
        if self._endpoints is None:
            self._endpoints = self.resolver()
        return self._endpoints

    def client(self) -> ConnectClient:
        """A client for Connect's REST API (short timeouts: a doctor must answer)."""
        return self.endpoints.connect(timeout=10)


Check = Callable[[Examination], Iterator[Finding]]


def _database(exam: Examination) -> Iterator[Finding]:
    engine = exam.endpoints.engine(connect_args={"connect_timeout": 5})
    try:
        with engine.connect() as conn:
            version = conn.execute(text("SHOW server_version")).scalar_one()
    finally:
        engine.dispose()
    shown = make_url(exam.endpoints.database_url()).render_as_string(hide_password=True)
    yield Finding("database", True, f"Postgres {version} at {shown}")


def _migrations(exam: Examination) -> Iterator[Finding]:
    from migrations import runner

    url = exam.endpoints.database_url()
    current, head = runner.current(url), runner.head()
    yield Finding(
        "migrations",
        current == head,
        f"at revision {current} (head {head})" if current else f"none applied (head {head})",
        "" if current == head else "run `outboxkit db upgrade`",
    )


def _capture(exam: Examination) -> Iterator[Finding]:
    from cdc.preflight import run_checks
    from cdc.settings import connector_settings

    settings = exam.settings
    cs = connector_settings(settings, exam.endpoints.database_url())
    engine = exam.endpoints.engine()
    try:
        with engine.connect() as conn:
            checks = run_checks(
                conn, slot_name=settings.slot_name, publication_name=settings.publication_name
            )
            role = _role(conn, cs.database_user, cs.outbox_tables)
    finally:
        engine.dispose()
    for check in checks:
        detail, _, fix = check.detail.partition(": ") if not check.ok else (check.detail, "", "")
        yield Finding(check.name, check.ok, detail, fix)
    yield role


def _role(conn: Any, role: str, tables: Sequence[str]) -> Finding:
    row = conn.execute(
        text("SELECT rolreplication, rolcanlogin FROM pg_roles WHERE rolname = :r"), {"r": role}
    ).first()
    fix = "run `outboxkit cdc prepare` as the set-up role"
    if row is None:
        return Finding("cdc role", False, f"role {role} does not exist", fix)
    unreadable = [
        t
        for t in tables
        if not conn.execute(
            text("SELECT to_regclass(:t) IS NOT NULL AND has_table_privilege(:r, :t, 'SELECT')"),
            {"r": role, "t": t},
        ).scalar_one()
    ]
    if not (row.rolreplication and row.rolcanlogin) or unreadable:
        lacks = [] if row.rolreplication and row.rolcanlogin else ["LOGIN REPLICATION"]
        lacks += [f"SELECT on {t}" for t in unreadable]
        return Finding("cdc role", False, f"role {role} lacks {', '.join(lacks)}", fix)
    return Finding("cdc role", True, f"role {role}: LOGIN REPLICATION, reads {', '.join(tables)}")


def _kafka(exam: Examination) -> Iterator[Finding]:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({**exam.endpoints.kafka(), "log_level": 0})  # its failure is the finding
    described = admin.list_topics(timeout=10)
    brokers = len(described.brokers)
    yield Finding("kafka", True, f"{brokers} broker(s) at {exam.endpoints.bootstrap_servers}")


def _job_topics(exam: Examination) -> Iterator[Finding]:
    from confluent_kafka.admin import AdminClient

    from outboxkit.kernel.kafka.security import client_config

    for job in exam.jobs:  # on the job's own cluster, as the job's own clients reach it
        config = client_config(job.bootstrap_servers, job.kafka_security, job.kafka_options)
        admin = AdminClient(dict[str, str | int | float | bool](config))
        described = admin.list_topics(timeout=10)
        for topic in job.topics:
            meta = described.topics.get(topic)
            error = None if meta is None else meta.error
            ok = meta is not None and error is None
            detail = f"job {job.name}: topic {topic} on {job.bootstrap_servers} " + (
                "readable" if ok else ("missing" if meta is None else f"error {error}")
            )
            fix = "" if ok else "check the prefix, or grant the job's principal DESCRIBE, READ"
            yield Finding("kafka topics", ok, detail, fix)


def _connect(exam: Examination) -> Iterator[Finding]:
    client = exam.client()
    try:
        yield Finding("connect", True, f"Kafka Connect {client.version()} at {client.url}")
    finally:
        client.close()


def _outbox_connector(exam: Examination) -> Iterator[Finding]:
    from cdc import plugins
    from cdc.identity import SourceIdentityError

    client = exam.client()
    try:
        try:
            config = desired_config(exam)
        except SourceIdentityError as exc:  # `cdc apply` fails the same way
            detail, _, fix = str(exc).partition(": ")
            yield Finding("source identity", False, detail, fix)
            return
        lacking = plugins.missing(config, client.plugins())
        yield Finding(
            "connect plugins",
            not lacking,
            "missing " + ", ".join(lacking) if lacking else "Debezium and the transform installed",
            plugins.fix_for(lacking).replace("\n", "; "),
        )
        yield _connector(client, exam.settings.connector_name, config)
    finally:
        client.close()


def desired_config(exam: Examination) -> dict[str, str]:
    """The connector's config as `outboxkit cdc apply` would put it, the database's identity
    read as it reads it."""
    from cdc.identity import database_identity
    from cdc.settings import connector_config

    url = exam.endpoints.database_url()
    return connector_config(exam.settings, url, identity=database_identity(url))


def _connector(client: ConnectClient, name: str, config: dict[str, str]) -> Finding:
    from cdc import collisions

    current = client.get_config(name)
    if current is None:
        return Finding("connector", False, f"{name} is not registered", "run `outboxkit cdc apply`")
    current = {k: v for k, v in current.items() if k != "name"}
    new = collisions.capture_of(name, config)
    replaced = None if new is None else collisions.replaced(current, new)
    if replaced is not None:  # a restored or replaced database under the running connector
        detail, _, fix = replaced.partition(". ")
        return Finding("connector", False, detail, fix)
    differ = sorted(k for k in config.keys() | current.keys() if config.get(k) != current.get(k))
    if differ:
        shown = ", ".join(differ[:5]) + (f" (+{len(differ) - 5})" if len(differ) > 5 else "")
        return Finding(
            "connector", False, f"{name}'s config differs in {shown}", "run `outboxkit cdc apply`"
        )
    status = client.status(name)
    state = "unknown" if status is None else status.state
    running = status is not None and status.running
    fix = (
        ""
        if running
        else "see `outboxkit cdc preflight`; `outboxkit cdc restart` for a FAILED task"
    )
    return Finding("connector", running, f"{name}: config as applied, {state}", fix)


def _spark(exam: Examination) -> Iterator[Finding]:
    from outboxkit.endpoints import spark_jars

    java = shutil.which("java")
    version = ""
    if java is not None:
        done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
        version = (done.stderr.splitlines() or [""])[0]
    # Warnings: `outboxkit consume` needs both here, a job submitted to a cluster does not.
    yield Finding(
        "java",
        True,
        version or "no java on PATH: `outboxkit consume` cannot start Spark here",
        "" if java else "install Java 17 (e.g. apt-get install openjdk-17-jre-headless)",
        warning=java is None,
    )
    jars = spark_jars(exam.settings)
    kafka = [j for j in jars if j.name.startswith("spark-sql-kafka-0-10")]
    yield Finding(
        "spark jars",
        True,
        f"{len(jars)} jar(s), Kafka connector {kafka[0].name}"
        if kafka
        else "no Kafka connector for `outboxkit consume`",
        ""
        if kafka
        else "set OUTBOXKIT_SPARK_JARS to spark-sql-kafka-0-10 and its dependencies, "
        "or submit the jobs with spark-submit --packages",
        warning=not kafka,
    )


def _prefixes(exam: Examination) -> Iterator[Finding]:
    prefix = exam.settings.topic_prefix
    for job in exam.jobs:
        stray = [t for t in job.topics if not t.startswith(prefix)]
        yield Finding(
            "topic prefix",
            not stray,
            f"job {job.name} reads {', '.join(stray or job.topics)}"
            + (f", outside the connector's prefix {prefix}" if stray else ""),
            "" if not stray else "give the job and OUTBOXKIT_TOPIC_PREFIX the same prefix",
        )


# Each check, and the checks it needs to have passed first.
CHECKS: tuple[tuple[str, Check, tuple[str, ...]], ...] = (
    ("database", _database, ()),
    ("migrations", _migrations, ("database",)),
    ("capture", _capture, ("database",)),
    ("kafka", _kafka, ()),
    ("kafka topics", _job_topics, ()),
    ("connect", _connect, ()),
    ("connector", _outbox_connector, ("database", "connect")),
    ("spark", _spark, ()),
    ("topic prefix", _prefixes, ()),
)


def examine(exam: Examination) -> list[Finding]:
    """Run every check in order; an error of a check is its failing finding."""
    findings: list[Finding] = []
    for name, check, needs in CHECKS:
        blocked = [n for n in needs if n in exam.failed]
        if blocked:
            findings.append(Finding(name, None, f"skipped: {', '.join(blocked)} failed"))
            exam.failed.add(name)
            continue
        try:
            found = list(check(exam))
        except Exception as exc:  # an unreachable endpoint is the finding, not a crash
            found = [Finding(name, False, _reason(exc), _fix_for(name))]
        if any(f.ok is False for f in found):
            exam.failed.add(name)
        findings += found
    return findings


def _reason(exc: Exception) -> str:
    """The error's first line; a library's error named by its class (the framework's own
    errors, and plain ValueErrors, say what they are in their text)."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
    ours = type(exc).__module__.partition(".")[0] in FRAMEWORK
    return (
        first
        if ours or type(exc) in (ValueError, RuntimeError)
        else f"{type(exc).__name__}: {first}"
    )


def _fix_for(check: str) -> str:
    return {
        "database": "check OUTBOXKIT_DATABASE_URL, its password file, and that Postgres runs",
        "kafka": "check OUTBOXKIT_KAFKA_BOOTSTRAP_SERVERS and OUTBOXKIT_KAFKA_SECURITY_*",
        "kafka topics": "check the job's bootstrap_servers and kafka_security",
        "connect": "check OUTBOXKIT_CONNECT_URL (and OUTBOXKIT_CONNECT_USER)",
    }.get(check, "see the error above (--debug)")
