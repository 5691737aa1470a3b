"""The stack's connectors: their settings (as Connect reaches the database, the CDC role's
password by config-provider reference), the capture's grants and publication, registration, and
at `down` the replication slots and publications they leave."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy import text
from sqlalchemy.engine import make_url

from cdc import roles, supervisor
from cdc import settings as cdc_settings
from cdc.config import ConnectorSettings, build_connector_config
from cdc.identity import database_identity
from cdc.preflight import drop_slot
from cdc.roles import admin_connection
from cdc.settings import CdcSettings
from outboxkit.kernel import retry
from outboxkit.kernel.engines import engine_for
from outboxkit_workshop.devstack import connect
from outboxkit_workshop.devstack.processes import alive, wait_until
from outboxkit_workshop.devstack.secrets import SecretStore
from outboxkit_workshop.devstack.settings import StackSettings
from outboxkit_workshop.devstack.state import EMBEDDED, StackState


class StackView(Protocol):
    """What the connectors and the status report use of the stack
    (`outboxkit_workshop.devstack.stack.Stack`)."""

    settings: StackSettings
    secrets: SecretStore
    dir: Path
    state_file: Path
    echo: Callable[[str], Any]

    def connect_client(self, endpoint: str | None = None, *, timeout: float = 30) -> Any: ...

    def connect_url(self, state: StackState | None = None) -> str: ...

    def write_pgpass(self) -> None: ...


def connector_settings(
    stack: StackView, database_url: str, settings: CdcSettings | None = None
) -> ConnectorSettings:
    """Connector settings for the stack's database, as Connect must reach it (the operator's
    `cdc.settings.connector_settings` of ``settings``, else the stack's, with the stack's
    secrets)."""
    parsed = make_url(database_url)
    if not parsed.database:
        parsed = parsed.set(database=stack.settings.database_name)
    # The connector logs in as the CDC role; Connect's config provider reads its password where
    # the worker sees the stack's secrets, so Connect's REST API, its config topic and its logs
    # only ever show the placeholder.
    return replace(
        cdc_settings.connector_settings(settings or stack.settings, parsed),
        database_password=_password_placeholder(stack, stack.settings.cdc_role),
    )


def _password_placeholder(stack: StackView, role: str) -> str:
    """The Connect config-provider reference to ``role``'s password file."""
    directory = stack.settings.connect_secrets_dir or str(stack.secrets.dir)
    return f"${{{connect.SECRETS_PROVIDER}:{directory}:{stack.secrets.file(role).name}}}"


def _prepare_capture(stack: StackView, state: StackState, cs: ConnectorSettings) -> None:
    """The CDC role, its grants on the outbox tables of ``cs``'s database and the connector's
    publication, made by the set-up role."""
    stack.secrets.password(cs.database_user)
    stack.write_pgpass()
    admin = make_url(state.postgres.endpoint).set(database=cs.database_name)
    with admin_connection(admin) as conn:
        roles.prepare_capture(conn, cs, stack.secrets.password(cs.database_user))


def register(stack: StackView, state: StackState, cs: ConnectorSettings | None = None) -> None:
    """The CDC role's grants and the publication for ``cs`` (the stack's own connector when
    None), then the connector registered (its config put when it differs) and RUNNING; what was
    created is recorded in ``state`` for `down` to drop."""
    cs = cs or connector_settings(stack, state.postgres.endpoint)
    _prepare_capture(stack, state, cs)
    # Every record carries the database's identity, as `outboxkit cdc apply` writes it.
    database = make_url(state.postgres.endpoint).set(database=cs.database_name)
    config = build_connector_config(replace(cs, source_identity=database_identity(database)))
    url = stack.connect_url(state)
    worker = next((n for n in state.connect.nodes if n.endpoint == url), None)
    client = stack.connect_client(url)
    wait_until("kafka connect", client.ready, timeout=240, pid=worker.pid if worker else None)
    if client.get_config(cs.name) != config:
        client.put_config(cs.name, config)
    publication = cs.publication_name
    if cs.database_name != make_url(state.postgres.endpoint).database:
        publication = f"{cs.database_name}:{publication}"  # dropped from its own database
    for items, item in (
        (state.connectors, cs.name),
        (state.slots, cs.slot_name),
        (state.publications, publication),
    ):
        if item not in items:
            items.append(item)
    state.save(stack.state_file)
    # A task that failed on a passing cause (a node of the cluster lost mid-commit) is
    # restarted: it resumes from its last committed offset.
    status = supervisor.wait_running(client, cs.name, timeout=180, echo=stack.echo)
    stack.echo(f"connector  {status.name} {status.state}")


def drop_replication(state: StackState, echo: Callable[[str], Any]) -> None:
    """Drop the slots and publications ``state`` records (the walsender may take a moment to
    let its slot go)."""
    if state.postgres.mode == EMBEDDED and not alive(state.postgres.pid):
        return
    engine = engine_for(state.postgres.endpoint, "once")
    try:
        for slot in state.slots:

            def dropped(slot: str = slot) -> bool:
                with engine.begin() as conn:
                    if drop_slot(conn, slot):
                        echo(f"slot       {slot} dropped")
                return True

            try:  # the walsender may take a moment to exit
                retry.wait_until(dropped, timeout=15, ignore=(Exception,), what=f"slot {slot}")
            except retry.WaitTimeout as exc:
                echo(f"warning: could not drop slot {slot}: {exc.__cause__}")
        for entry in state.publications:
            database, _, publication = entry.rpartition(":")
            url = make_url(state.postgres.endpoint)
            target = engine_for(url.set(database=database or url.database), "once")
            try:
                with target.begin() as conn:
                    conn.execute(text(f'DROP PUBLICATION IF EXISTS "{publication}"'))
            except Exception as exc:  # the database may be gone already
                echo(f"warning: could not drop publication {entry}: {exc}")
            finally:
                target.dispose()
    finally:
        engine.dispose()
