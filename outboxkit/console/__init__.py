"""The operator console (`outboxkit console JOB...`): the pipeline, its failures and their fixes
on one page, served by the framework from the same tables, Kafka offsets and Connect status the
CLI reads. `build_console` is its composition root."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Engine

if TYPE_CHECKING:
    from fastapi import FastAPI

    from cdc.endpoints import Endpoints
    from outboxkit.settings import Settings


@dataclass
class Console:
    """The console's app and what to close when it stops."""

    app: FastAPI
    engines: list[Engine]
    reader: Any

    def close(self) -> None:
        """Close the Kafka clients and every engine."""
        self.reader.close()
        for engine in self.engines:
            engine.dispose()


def build_console(
    settings: Settings, jobs: Sequence[Any], endpoints: Endpoints | None = None
) -> Console:
    """The console on ``jobs`` (their consumers, databases and Kafka), with the connectors,
    slots and outbox of ``endpoints`` (None: none but the jobs' own databases)."""
    from outboxkit.console import auth
    from outboxkit.console.actions import Operator
    from outboxkit.console.app import ConsoleConfig, create_console
    from outboxkit.console.overview import OverviewReader, Watched
    from outboxkit.kernel.engines import engine_for
    from outboxkit.kernel.kafka.security import client_config
    from outboxkit.kernel.secrets import read_secret

    if settings.console_users_file is None:
        raise auth.UsersFileError(
            "the console needs its users: set OUTBOXKIT_CONSOLE_USERS_FILE to a file written by "
            "`outboxkit console-user NAME --role operator`"
        )
    users = auth.read_users(settings.console_users_file)
    secret = (
        read_secret(settings.console_secret_file, "OUTBOXKIT_CONSOLE_SECRET_FILE").encode()
        if settings.console_secret_file is not None
        else None
    )
    engines: list[Engine] = []
    watched, inboxes, kafka = [], {}, {}
    databases: dict[str, Engine] = {}
    for job in jobs:
        reading, acting = job.engine("metrics"), job.engine("once")
        engines += [reading, acting]
        client = client_config(job.bootstrap_servers, job.kafka_security, job.kafka_options)
        watched.append(Watched(job.name, job.consumer, job.topics, reading, client))
        inboxes[job.consumer] = job.inbox(acting)
        kafka[job.consumer] = client
        databases.setdefault(_shown(reading), reading)
    connect = None
    if endpoints is not None:
        if endpoints.database is not None:
            outbox = engine_for(endpoints.database_url(), "metrics")  # pooled: read every look
            engines.append(outbox)
            databases.setdefault(_shown(outbox), outbox)
        if endpoints.connect_url is not None:
            connect = lambda: endpoints.connect(timeout=3)  # noqa: E731
    reader = OverviewReader(watched, databases, connect)
    config = ConsoleConfig(
        users,
        users_file=settings.console_users_file,
        trace_url=settings.console_trace_url,
        docs_url=(settings.console_docs_url or "").rstrip("/") or None,
        secure_cookie=(
            settings.console_tls_cert_file is not None
            if settings.console_secure_cookie is None
            else settings.console_secure_cookie
        ),
    )
    if secret is not None:
        config.secret = secret
    return Console(create_console(config, reader, Operator(inboxes, kafka)), engines, reader)


def _shown(engine: Engine) -> str:
    """A database as a page names it: host, port and name, never a password."""
    url = engine.url
    return f"{url.database} on {url.host or 'localhost'}:{url.port or 5432}"
