"""Least privilege in Postgres: a login role per service that owns only its own database, and a
CDC role that may replicate and read the outbox tables, nothing else. A set-up role creates them
(`outboxkit cdc prepare`, the dev stack); nothing connects as it at run time."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo
from sqlalchemy.engine import URL

if TYPE_CHECKING:
    from cdc.config import ConnectorSettings

# Where a new role's password is hashed: on the client, so the password itself never reaches a
# server log (a failed ALTER ROLE is logged with its statement).
_ALGORITHM = b"scram-sha-256"


class RoleError(RuntimeError):
    """A role cannot be created or altered as asked (the message says what to do instead)."""


# What a set-up role without the privileges should do instead.
AS_ADMINISTRATOR = (
    "run `outboxkit cdc prepare` as an administrator (--url with the URL of a superuser, or of a "
    "managed Postgres's administrator role)"
)


def ensure_role(
    conn: psycopg.Connection, role: str, password: str, *, replication: bool = False
) -> None:
    """Create or update a login role with ``password`` (and REPLICATION for the CDC role)."""
    verifier = conn.pgconn.encrypt_password(password.encode(), role.encode(), _ALGORITHM).decode()
    row = conn.execute(
        "SELECT rolsuper, rolreplication FROM pg_roles WHERE rolname = %s", (role,)
    ).fetchone()
    if row is not None and row[0]:
        raise RoleError(f"role {role!r} is a superuser: a service or the CDC role cannot be one")
    # Attributes are only set when they differ: on a managed Postgres the set-up role may not be
    # allowed to set REPLICATION, and a CDC role an administrator made is then left as it is.
    attributes = "LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE"
    if row is None or row[1] != replication:
        attributes += " REPLICATION" if replication else " NOREPLICATION"
    try:
        conn.execute(
            sql.SQL("{verb} ROLE {role} " + attributes + " PASSWORD {pw}").format(
                verb=sql.SQL("ALTER" if row is not None else "CREATE"),
                role=sql.Identifier(role),
                pw=sql.Literal(verifier),
            )
        )
    except psycopg.errors.InsufficientPrivilege as exc:
        raise RoleError(
            f"role {conn.info.user} cannot create or alter role {role!r} "
            f"({exc.diag.message_primary}): {AS_ADMINISTRATOR}, or have one create the role "
            f"(LOGIN{' REPLICATION' if replication else ''}) with the password in its secrets "
            "file"
        ) from exc


def ensure_database(conn: psycopg.Connection, database: str, owner: str) -> None:
    """``database`` owned by ``owner``; only its owner (and roles granted later) may connect."""
    row = conn.execute(
        "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = %s", (database,)
    ).fetchone()
    name, role = sql.Identifier(database), sql.Identifier(owner)
    if row is None:
        conn.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(name, role))
    elif row[0] != owner:
        conn.execute(sql.SQL("ALTER DATABASE {} OWNER TO {}").format(name, role))
    conn.execute(sql.SQL("REVOKE ALL ON DATABASE {} FROM PUBLIC").format(name))


def hand_over_objects(conn: psycopg.Connection, owner: str, schema: str = "public") -> None:
    """Make ``owner`` own every table, sequence and view of ``schema`` (a database created before
    roles existed had them owned by the superuser)."""
    rows = conn.execute(
        "SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'v', 'm', 'S')"
        " AND pg_get_userbyid(c.relowner) <> %s AND NOT EXISTS ("
        "   SELECT 1 FROM pg_depend d WHERE d.objid = c.oid AND d.deptype IN ('a', 'i'))",
        (schema, owner),
    ).fetchall()
    for relname, kind in rows:
        what = {"S": "SEQUENCE", "v": "VIEW", "m": "MATERIALIZED VIEW"}.get(kind, "TABLE")
        conn.execute(
            sql.SQL("ALTER {} {} OWNER TO {}").format(
                sql.SQL(what), sql.Identifier(schema, relname), sql.Identifier(owner)
            )
        )


def grant_capture(
    conn: psycopg.Connection,
    database: str,
    cdc_role: str,
    outbox_tables: Sequence[str],
    heartbeat_table: str | None,
) -> None:
    """Let the CDC role connect to ``database`` and read the outbox tables (and update the
    heartbeat row), nothing else."""
    conn.execute(
        sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(
            sql.Identifier(database), sql.Identifier(cdc_role)
        )
    )
    tables = [*outbox_tables, *([heartbeat_table] if heartbeat_table else [])]
    for schema in sorted({t.split(".")[0] for t in tables}):
        conn.execute(
            sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(
                sql.Identifier(schema), sql.Identifier(cdc_role)
            )
        )
    for table in outbox_tables:
        conn.execute(
            sql.SQL("GRANT SELECT ON {} TO {}").format(_table(table), sql.Identifier(cdc_role))
        )
    if heartbeat_table:
        conn.execute(
            sql.SQL("GRANT SELECT, UPDATE ON {} TO {}").format(
                _table(heartbeat_table), sql.Identifier(cdc_role)
            )
        )


def ensure_publication(conn: psycopg.Connection, name: str, tables: Sequence[str]) -> None:
    """The connector's publication over exactly ``tables`` (the CDC role cannot create one: that
    takes owning the tables)."""
    listed = sql.SQL(", ").join(_table(t) for t in tables)
    exists = conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (name,)).fetchone()
    verb = "ALTER PUBLICATION {} SET TABLE {}" if exists else "CREATE PUBLICATION {} FOR TABLE {}"
    conn.execute(sql.SQL(verb).format(sql.Identifier(name), listed))


def restrict_messages(conn: psycopg.Connection, writer: str | None = None) -> None:
    """Only ``writer`` (a service's role) may emit logical decoding messages in this database.

    Postgres grants EXECUTE on pg_logical_emit_message to PUBLIC, and the connector captures the
    outbox prefix's messages: any role that could connect (the CDC role included) could otherwise
    have a forged event routed to Kafka. Every overload is covered (Postgres 17 added one)."""
    overloads = conn.execute(
        "SELECT p.oid::regprocedure::text FROM pg_proc p"
        " WHERE p.proname = 'pg_logical_emit_message'"
        " AND p.pronamespace = 'pg_catalog'::regnamespace"
    ).fetchall()
    for (signature,) in overloads:
        function = sql.SQL(signature)  # from the catalog: pg_logical_emit_message(boolean,...)
        conn.execute(sql.SQL("REVOKE EXECUTE ON FUNCTION {} FROM PUBLIC").format(function))
        if writer is not None:
            conn.execute(
                sql.SQL("GRANT EXECUTE ON FUNCTION {} TO {}").format(
                    function, sql.Identifier(writer)
                )
            )


def _table(qualified: str) -> sql.Identifier:
    schema, _, table = qualified.partition(".")
    return sql.Identifier(schema, table)


def table_owners(conn: psycopg.Connection, tables: Sequence[str]) -> list[str]:
    """The roles owning ``tables`` (those that exist), each once: the service roles that ran
    the framework's migrations."""
    owners: list[str] = []
    for qualified in tables:
        schema, _, table = qualified.partition(".")
        row = conn.execute(
            "SELECT tableowner FROM pg_tables WHERE schemaname = %s AND tablename = %s",
            (schema, table),
        ).fetchone()
        if row is not None and row[0] not in owners:
            owners.append(row[0])
    return owners


def prepare_capture(
    conn: psycopg.Connection,
    cs: ConnectorSettings,
    password: str,
    *,
    message_writers: Sequence[str] = (),
) -> None:
    """What the connector of ``cs`` needs in its database, made by a set-up role: the CDC role
    (REPLICATION, ``password``), its grants on the outbox tables (and the heartbeat row), the
    connector's publication, and, when it captures messages, only ``message_writers`` allowed
    to emit them. Safe to repeat.

    Args:
        conn: An autocommit connection to the outbox's database, as the set-up role.
        cs: The connector's settings (`cdc.settings.connector_settings`).
        password: The CDC role's password.
        message_writers: The roles that may emit logical decoding messages (the services
            publishing in message mode).
    """
    ensure_role(conn, cs.database_user, password, replication=True)
    heartbeat = cs.heartbeat_table if cs.heartbeat_interval_ms else None
    try:
        grant_capture(conn, cs.database_name, cs.database_user, cs.outbox_tables, heartbeat)
        ensure_publication(
            conn, cs.publication_name, [*cs.outbox_tables, *([heartbeat] if heartbeat else [])]
        )
        if cs.message_prefix is not None:  # it captures messages: only the writers may emit
            restrict_messages(conn)
            for writer in message_writers:
                restrict_messages(conn, writer=writer)
    except psycopg.errors.InsufficientPrivilege as exc:
        raise RoleError(
            f"role {conn.info.user} may not set up the capture in database {cs.database_name} "
            f"({exc.diag.message_primary}): {AS_ADMINISTRATOR}"
        ) from exc


def admin_connection(url: URL) -> psycopg.Connection:
    """An autocommit psycopg connection for set-up statements (CREATE DATABASE cannot run in a
    transaction).

    Args:
        url: The database's SQLAlchemy URL, as the set-up role (its password, if any, in it).
    """
    params = {k: v for k, v in url.query.items() if isinstance(v, str)}
    conninfo = make_conninfo(
        host=url.host, port=url.port, user=url.username, dbname=url.database, **params
    )
    return psycopg.connect(conninfo, password=url.password, autocommit=True)
