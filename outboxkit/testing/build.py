"""The services and consumer jobs a harness runs: given as objects, or as the factories a
deployment runs (``orders.app``, ``jobs:orders``), which read their settings from the
environment. While the factories run, the harness sets, for each of its environment prefixes
(``ORDERS_``): the database URL, a bootstrap server that is never reached, its topic prefix,
the outbox in delete mode and the background releaser off (the harness releases scheduled
messages itself, by its clock).

Every outbox writes rows: a message-mode outbox (no row, nothing to capture) is run in delete
mode, which gives consumers the same records. Every job keeps the inbox ledger, which
`Harness.applied` reads."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace

from fastapi import FastAPI

from outbox.publish import Outbox
from outboxkit.kernel.errors import OutboxError
from service_template.app import ServiceApp
from spark_consumers.job import Job, load_job

# Where the factories' consumer settings point Kafka: nothing connects to it in a harness.
NO_KAFKA = "harness.invalid:9092"

ServiceSource = FastAPI | Callable[[], FastAPI]
JobSource = Job | Callable[[], Job] | str


class HarnessError(OutboxError):
    """The harness cannot run what it was given, or did not settle; the message says why."""


def prefixes(names: Sequence[str]) -> list[str]:
    """Environment prefixes as settings classes spell them: ``orders`` or ``ORDERS_`` is
    ``ORDERS_``."""
    return [n.upper() if n.endswith("_") else f"{n.upper()}_" for n in names]


def settings_env(names: Sequence[str], url: str, topic_prefix: str) -> dict[str, str | None]:
    """The variables set (None: unset) for the factories of each prefix of ``names``."""
    env: dict[str, str | None] = {}
    for prefix in prefixes(names):
        env |= {
            f"{prefix}DATABASE_URL": url,
            f"{prefix}DATABASE_PASSWORD_FILE": None,  # the URL carries the password
            f"{prefix}KAFKA_BOOTSTRAP_SERVERS": NO_KAFKA,
            f"{prefix}TOPIC_PREFIX": topic_prefix,
            f"{prefix}OUTBOX__MODE": "delete",
            f"{prefix}OUTBOX__RELEASE__ENABLED": "false",
        }
    return env


@contextlib.contextmanager
def environment(values: Mapping[str, str | None]) -> Iterator[None]:
    """``os.environ`` with ``values`` set (None: removed) for the block, then as it was."""
    saved = {name: os.environ.get(name) for name in values}
    try:
        for name, value in values.items():
            _put(name, value)
        yield
    finally:
        for name, value in saved.items():
            _put(name, value)


def service(source: ServiceSource) -> FastAPI:
    """The app of ``source`` (an app of `service_template.create_app`, or its factory), its
    outbox writing rows and its background releaser off."""
    app = source if isinstance(source, FastAPI) else source()
    plumbing = getattr(getattr(app, "state", None), "service", None)
    if not isinstance(plumbing, ServiceApp):
        raise HarnessError(f"{source!r} did not give an app of service_template.create_app")
    plumbing.outbox = _row_writing(plumbing.outbox)
    release = plumbing.settings.outbox.release
    if release.enabled:  # read by the app's lifespan when the harness's client starts it
        plumbing.settings.outbox.release = release.model_copy(update={"enabled": False})
    return app


def job(source: JobSource) -> Job:
    """The job of ``source`` (a `Job`, a factory, or ``module:attribute``), its outbox writing
    rows and its inbox keeping the ledger."""
    if isinstance(source, str):
        built = load_job(source)
    else:
        built = source if isinstance(source, Job) else source()
    if not isinstance(built, Job):
        raise HarnessError(f"{source!r} did not give a spark_consumers.Job")
    return replace(built, outbox=_row_writing(built.outbox), ledger=True)


def _row_writing(outbox: Outbox) -> Outbox:
    return replace(outbox, mode="delete") if outbox.mode == "message" else outbox


def _put(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
