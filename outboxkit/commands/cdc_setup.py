"""`outboxkit cdc prepare` and `outboxkit cdc apply`: an operator's set-up of the outbox's
capture from the OUTBOXKIT_* settings (`cdc.settings.CdcSettings`), on their own Postgres and
Kafka Connect. Both are safe to repeat; ``--dry-run`` prints what they would do and changes
nothing."""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import TYPE_CHECKING, Any, cast

from outboxkit.parsers import SubParsers, add_url, command

if TYPE_CHECKING:
    import psycopg

    from cdc.config import ConnectorSettings
    from cdc.connect import ConnectClient
    from outboxkit.settings import Settings

# A role's password as ensure_role sends it (a SCRAM verifier): never printed.
_VERIFIER = re.compile(r"'SCRAM-SHA-256\$[^']*'")


class _Rehearsal:
    """A connection that runs the catalog queries and prints every other statement instead of
    running it (``prepare --dry-run``)."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self._conn = conn
        self.pgconn = conn.pgconn

    def execute(self, query: Any, params: Any = None) -> Any:
        from psycopg import sql

        text = query.as_string(self._conn) if isinstance(query, sql.Composable) else str(query)
        if text.lstrip().upper().startswith("SELECT"):
            return self._conn.execute(query, params)
        print(_VERIFIER.sub("'********'", text) + ";")
        return None


def _capture(settings: Settings, args: argparse.Namespace) -> tuple[Any, ConnectorSettings]:
    """The set-up role's database URL and the connector's settings."""
    from cdc.settings import connector_settings
    from outboxkit.endpoints import resolve

    url = resolve(settings).database_url(args.url)
    return url, connector_settings(settings, url)


def _prepare(args: argparse.Namespace, settings: Settings) -> int:
    from sqlalchemy.engine import make_url

    from cdc import roles
    from cdc.settings import role_password

    url, cs = _capture(settings, args)
    password = role_password(settings) if settings.cdc_password_file or not args.dry_run else "-"
    tables = [*cs.outbox_tables, *([cs.heartbeat_table] if cs.heartbeat_interval_ms else [])]
    with roles.admin_connection(make_url(url)) as conn:
        missing = [t for t in tables if t and not _exists(conn, t)]
        if missing:
            raise LookupError(
                f"no table {', '.join(missing)} in database {cs.database_name}: run "
                "`outboxkit db upgrade` first (it creates the outbox and heartbeat tables)"
            )
        writers = args.message_writer or roles.table_owners(conn, cs.outbox_tables)
        target = cast("psycopg.Connection", _Rehearsal(conn)) if args.dry_run else conn
        roles.prepare_capture(target, cs, password, message_writers=writers)
    if not args.dry_run:
        print(
            f"role {cs.database_user}: REPLICATION, reads {', '.join(cs.outbox_tables)}; "
            f"publication {cs.publication_name} on {cs.database_name}"
            + (f"; messages only from {', '.join(writers)}" if cs.message_prefix else "")
        )
    return 0


def _exists(conn: psycopg.Connection, table: str) -> bool:
    row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()
    return bool(row and row[0])


def _apply(args: argparse.Namespace, settings: Settings) -> int:
    from cdc import supervisor
    from cdc.settings import connector_config, masked
    from outboxkit.endpoints import resolve

    url, cs = _capture(settings, args)
    config = connector_config(settings, url, identity=_identity(url))
    if not settings.cdc_password_reference:
        print(
            "warning: the connector's config holds the CDC role's password itself (Connect "
            "keeps it in its config topic): set OUTBOXKIT_CDC_PASSWORD_REFERENCE to a "
            "config-provider reference, like ${file:/opt/kafka/secrets/cdc.properties:password}",
            file=sys.stderr,
        )
    if args.dry_run:
        print(json.dumps(masked(config), indent=2, sort_keys=True))
        return 0
    client = resolve(settings).connect()
    _check_plugins(client, config)
    current = client.get_config(cs.name)
    _check_collisions(client, cs.name, config, current, rename=args.rename_source)
    if current is not None and {k: v for k, v in current.items() if k != "name"} == config:
        print(f"connector {cs.name}: unchanged")
    else:
        client.put_config(cs.name, config)
        print(f"connector {cs.name}: {'created' if current is None else 'updated'}")
        if current is not None:
            _restarted_with(client, cs.name, config, args.timeout)
    status = supervisor.wait_running(client, cs.name, timeout=args.timeout)
    print(f"connector {status.name}: {status.state}")
    return 0


def _restarted_with(
    client: ConnectClient, name: str, config: dict[str, str], timeout: float
) -> None:
    """After an update: wait until the connector made its tasks' configs from ``config``, then
    restart its tasks, so that the RUNNING `wait_running` sees next is theirs with it (the old
    tasks report RUNNING until Connect restarts them, a moment after the update)."""
    from cdc.connect import ConnectError
    from outboxkit.kernel.retry import wait_until

    wait_until(
        lambda: client.tasks_run(name, config),
        timeout=timeout,
        poll=0.5,
        what=f"connector {name}'s tasks to take the new config",
        error=ConnectError,
    )
    client.restart(name, include_tasks=True)


def _identity(url: Any) -> str:
    """The outbox database's identity, which every record will carry (`cdc.identity`)."""
    from cdc.identity import SourceIdentityError, database_identity
    from outboxkit.commands.errors import PROBLEM, CommandError

    try:
        return database_identity(url)
    except SourceIdentityError as exc:
        raise CommandError(str(exc), PROBLEM) from exc


def _check_plugins(client: ConnectClient, config: dict[str, str]) -> None:
    """Refuse a config the workers cannot run, naming what to install."""
    from cdc import plugins
    from cdc.connect import ConnectError

    lacking = plugins.missing(config, client.plugins())
    if lacking:
        raise ConnectError(
            f"Kafka Connect at {client.url} lacks {len(lacking)} plugin class(es) the outbox "
            f"connector needs:\n{plugins.fix_for(lacking)}"
        )


def _check_collisions(
    client: ConnectClient,
    name: str,
    config: dict[str, str],
    current: dict[str, str] | None,
    *,
    rename: bool,
) -> None:
    """Refuse a config that would share a source name or an outbox with another connector,
    rename the running one's source without --rename-source, or keep its source name for
    another database (`cdc.collisions`)."""
    from cdc import collisions
    from outboxkit.commands.errors import USAGE, CommandError

    new = collisions.capture_of(name, config)
    if new is None:
        return
    others = {other: client.get_config(other) for other in client.connectors() if other != name}
    problems = collisions.collisions(new, collisions.captures(others))
    renamed = None if rename else collisions.renamed(current, new)
    replaced = collisions.replaced(current, new)
    reused = None
    if rename and current is not None:
        reused = collisions.reused(current, new, client.stored_sources(name))
    problems += [problem for problem in (renamed, replaced, reused) if problem]
    if problems:
        raise CommandError("\n".join(f"refused: {p}" for p in problems), USAGE)


def add_parsers(actions: SubParsers) -> None:
    """Add `prepare` and `apply` to the `cdc` group's sub-commands."""
    prepare = command(
        actions,
        "prepare",
        _prepare,
        help="as the set-up role: the CDC role, its grants and the connector's publication",
        description="As a set-up role (--url, else OUTBOXKIT_DATABASE_URL; on Postgres 15 a "
        "superuser, to grant REPLICATION): create or update the CDC role (OUTBOXKIT_CDC_ROLE, "
        "its password from OUTBOXKIT_CDC_PASSWORD_FILE), grant it the outbox tables and the "
        "heartbeat row, create the connector's publication, and, when the connector captures "
        "messages, let only the service roles emit them. Run it after `outboxkit db upgrade`; "
        "safe to repeat.",
    )
    add_url(prepare)
    prepare.add_argument(
        "--message-writer",
        action="append",
        metavar="ROLE",
        help="a role that may emit the captured logical decoding messages, repeatable "
        "(default: the owners of the outbox tables)",
    )
    prepare.add_argument(
        "--dry-run", action="store_true", help="print the SQL it would run; change nothing"
    )
    apply = command(
        actions,
        "apply",
        _apply,
        help="put the outbox connector's config to Kafka Connect and wait until it runs",
        description="Build the outbox connector's config from the OUTBOXKIT_* settings and "
        "the database's identity (every record carries it: header sourceIdentity), put it to "
        "Kafka Connect (OUTBOXKIT_CONNECT_URL) when it differs from the running one, and wait "
        "until the connector and its task run. Refused: a source name or an outbox another "
        "connector has, a renamed source without --rename-source, a source name kept for "
        "another database. Safe to repeat.",
    )
    add_url(apply)
    apply.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for RUNNING")
    apply.add_argument(
        "--rename-source",
        action="store_true",
        help="let a running connector's source name (OUTBOXKIT_SERVER_NAME) change: what it "
        "has not confirmed is published again under the new name",
    )
    apply.add_argument(
        "--dry-run",
        action="store_true",
        help="print the config as JSON (a password not given by reference masked); change nothing",
    )
