"""A consumer job: which topics, which consumer name, which handlers, which database."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from sqlalchemy.engine import URL, Engine

from inbox.apply import DEFAULT_MAX_ATTEMPTS, DEFAULT_WINDOW, EXACTLY_ONCE_WINDOW, Inbox
from inbox.handlers import Handlers
from inbox.publishers import Publishers
from inbox.retries import RetryPolicy
from outbox import at_commit
from outbox.publish import Outbox
from outbox.unit import PublishedObserver
from outboxkit.kernel.engines import Role, engine_for
from outboxkit.kernel.kafka.security import PLAINTEXT, KafkaSecurity
from outboxkit.kernel.secrets import url_with_password
from spark_consumers.retry import BATCH_RETRY

# Seconds between micro-batches. A hop waits for the next trigger, then one batch. One job alone
# on a quiet machine: event -> inbox p50 0.45-0.58 s at 0.5 s, 0.26-0.30 s at 0.1 s or 0; but an
# idle query then costs its driver ~3-8% of a core at 0.1 s and 12-24% (and 10% of a broker) at
# 0, and the saga on 2 cores, its batches back to back, was not faster at 0.1 s than at 0.5 s:
# the idle checks compete with the batches for the cores. A deployment with cores to spare can
# lower it with --trigger.
DEFAULT_TRIGGER_SECONDS = 1.0
DEFAULT_MAX_OFFSETS_PER_TRIGGER = 200_000


@dataclass(frozen=True)
class Job:
    """Everything `outboxkit consume` needs to run one consumer.

    Attributes:
        name: The job's name: its streaming query's and its checkpoint folder's.
        topics: The Kafka topics it reads.
        consumer: The consumer's name, under which the inbox keeps its watermarks, recent ids
            and parked records.
        handlers: Per event type, one callable, or a `inbox.BatchHandler`.
        database_url: The consumer's database, without its password (see
            ``database_password_file``).
        bootstrap_servers: The Kafka cluster's bootstrap servers.
        max_attempts: Runs of a failing handler before its record is parked.
        retry: When a record whose handler failed for a passing reason (`inbox.RetryLater`, a
            timeout, a lock or serialization conflict) is retried: it waits parked, holding
            its key, and the consumer driver redrives it when due (`inbox.RetryPolicy`; the
            default retries 5 times, after 1, 4, 16, 64 and 256 s). ``RetryPolicy(attempts=0)``
            parks it for a person at once.
        exactly_once_source: True when every topic is written with exactly-once delivery
            (Debezium on a Connect worker with KIP-618 exactly-once source): Connect re-sends
            nothing, and the only re-sends left are Debezium's own when it resumes, close
            behind their originals: a small window.
        window: Offsets of recent event ids kept per partition against re-sends; None follows
            the source (`inbox.EXACTLY_ONCE_WINDOW` for exactly-once topics, else
            `inbox.DEFAULT_WINDOW`); 0 keeps none, for a producer that never writes an event
            twice (one whose Kafka transaction holds the event and its own source position, and
            that never looks for that position again).
        max_offsets_per_trigger: The most records a micro-batch reads, all partitions together
            (Spark's ``maxOffsetsPerTrigger``).
        kafka_options: Kafka client properties for Spark's source (given as ``kafka.<name>``)
            and the confluent-kafka clients.
        kafka_security: SASL/TLS of every Kafka client of the job, rendered for Spark's Java
            source and for the confluent-kafka clients (librdkafka rejects Java's JAAS and
            truststore properties, so ``kafka_options``, given to both, cannot carry it).
        outbox: How the handlers' events are written: the consuming service's outbox.
        batch_retry_seconds: Seconds a micro-batch's inbox transactions are retried while the
            database is unreachable (then the query fails and the runner restarts it from its
            checkpoint).
        ledger: Append every applied event to the inbox ledger, for `outboxkit audit` (off by
            default: it grows with the message count).
        database_password_file: The file holding the database password (a mounted secret),
            read where the engine is made: on each executor, so the password never travels in
            a task.
        stalled_transaction_seconds: Postgres ends a consumer session left idle inside its
            transaction this long (``idle_in_transaction_session_timeout``): an attempt frozen
            mid-slice (its executor stopped) then stops holding the partition's watermark lock,
            and another attempt of the slice (Spark's speculative copy, a retry) applies it.
            No handler may wait longer between two statements. 0 leaves Postgres's setting.
        publishers: Per aggregate type, the source names (their connectors') whose events of
            that type the job applies (`inbox.publishers`); a record of another source is
            parked with the reason. Empty: any source.
        settings_prefix: The environment prefix of the settings the job was built from (e.g.
            ``BILLING_``): an error about its database or its Kafka names the variable to
            check (``BILLING_DATABASE_URL``); None names the job's field instead.
    """

    name: str
    topics: tuple[str, ...]
    consumer: str
    handlers: Handlers
    database_url: str
    bootstrap_servers: str
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    exactly_once_source: bool = False
    window: int | None = None
    max_offsets_per_trigger: int = DEFAULT_MAX_OFFSETS_PER_TRIGGER
    kafka_options: Mapping[str, str] = field(default_factory=dict)
    kafka_security: KafkaSecurity = PLAINTEXT
    outbox: Outbox = field(default_factory=Outbox)
    batch_retry_seconds: float = BATCH_RETRY.budget
    ledger: bool = False
    database_password_file: str | None = None
    stalled_transaction_seconds: float = 10.0
    settings_prefix: str | None = None
    publishers: Mapping[str, Collection[str]] = field(default_factory=dict)

    def engine_url(self) -> URL:
        """The database URL with its password (masked when printed)."""
        return url_with_password(self.database_url, self.database_password_file)

    def dedup_window(self) -> int:
        """The event-id window this job's inbox keeps (0: watermark only)."""
        if self.window is not None:
            return self.window
        return EXACTLY_ONCE_WINDOW if self.exactly_once_source else DEFAULT_WINDOW

    def engine(self, role: Role = "consumer", **options: Any) -> Engine:
        """The one way to build an engine on this job's database, attached for at-commit
        publishing so that the events its handlers publish ride in their transaction's commit
        (`outbox.at_commit`).

        Args:
            role: The engine's role, which sizes its pool (`outboxkit.kernel.engines.engine_for`).
            options: More keyword arguments for `engine_for` (``pool_size``...).
        """
        url = self.engine_url()
        if self.stalled_transaction_seconds and "options" not in url.query:
            ms = round(self.stalled_transaction_seconds * 1000)
            timeout = f"-c idle_in_transaction_session_timeout={ms}"
            connect_args = {"options": timeout, **options.pop("connect_args", {})}
            options["connect_args"] = connect_args
        return at_commit.attach(engine_for(url, role, **options))

    def inbox(self, engine: Engine, on_published: PublishedObserver | None = None) -> Inbox:
        """The one way to build this job's inbox.

        Args:
            engine: The consumer's database engine.
            on_published: Told what the handlers published once a partition's transaction
                committed.
        """
        return Inbox(
            engine,
            self.consumer,
            self.handlers,
            window=self.dedup_window(),
            max_attempts=self.max_attempts,
            retry=self.retry,
            outbox=self.outbox,
            on_published=on_published,
            ledger=self.ledger,
            publishers=Publishers.of(self.publishers),
        )


def query_name(jobs: Sequence[Job]) -> str:
    """The name of the streaming query that reads ``jobs`` together, and of its checkpoint."""
    return "+".join(job.name for job in jobs)


class JobCodeError(ValueError):
    """The job's module or factory raised as it ran: the user's code failed (``error``, also
    the ``__cause__``); ``where`` names the module or the factory."""

    def __init__(self, spec: str, where: str, error: Exception) -> None:
        super().__init__(f"job {spec!r}: {where} raised {type(error).__name__}: {error}")
        self.spec = spec
        self.where = where
        self.error = error


def load_job(spec: str) -> Job:
    """Resolve ``module:attr`` to a Job (attr may be a Job or a zero-argument factory).

    Args:
        spec: ``module:attribute``, e.g. ``myservice.jobs:payments``.

    Raises:
        ValueError: The spec is malformed, or does not give a Job (the message says why).
        JobCodeError: The module or the factory raised as it ran (a ValueError too).
    """
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(
            f"job {spec!r}: write it as module:attribute, e.g. myservice.jobs:payments"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"job {spec!r} cannot be loaded: {exc}") from exc
    except Exception as exc:  # the user's module failed as it ran: say where (its __cause__)
        raise JobCodeError(spec, f"the job module {module_name}", exc) from exc
    try:
        target = getattr(module, attr)
    except AttributeError as exc:
        raise ValueError(f"job {spec!r} cannot be loaded: {exc}") from exc
    job = _built(spec, target)
    if not isinstance(job, Job):
        raise ValueError(f"job {spec!r} is a {type(job).__name__}, not a spark_consumers.Job")
    return job


def _built(spec: str, target: object) -> object:
    """``target``, or what it returns when it is a factory (not a Job itself)."""
    try:
        return target() if callable(target) and not isinstance(target, Job) else target
    except ValidationError as exc:  # the job's settings, read from its environment
        missing = "; ".join(
            f"{'.'.join(str(part) for part in error['loc'])}: {error['msg']}"
            for error in exc.errors()
        )
        raise ValueError(
            f"job {spec!r} cannot be built from its settings ({exc.title}): {missing}"
        ) from exc
    except Exception as exc:  # the user's factory failed: say where (its __cause__)
        raise JobCodeError(spec, f"the job factory {spec}", exc) from exc


JobFactory = Callable[[], Job]
