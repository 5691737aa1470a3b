"""The captured database's identity, ``<system_identifier>/<database name>``: Postgres's
``pg_control_system()`` (one 64-bit id per cluster, new with each initdb or logical restore,
shared by physical replicas) and ``current_database()``. The connector writes it on every record
(`outboxkit.kernel.wire.SOURCE_IDENTITY`); `outboxkit cdc apply` and `outboxkit doctor` compare
connectors by it, not by the host names their configs use."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.engine import URL, Connection
from sqlalchemy.exc import ProgrammingError

from outboxkit.kernel.engines import engine_for

INSUFFICIENT_PRIVILEGE = "42501"
_WHO = text("SELECT current_user, current_database()")
_SYSTEM = text("SELECT system_identifier::text FROM pg_control_system()")


class SourceIdentityError(RuntimeError):
    """The database's identity cannot be read by this role."""


def identity(system_identifier: int | str, database: str) -> str:
    """The identity of ``database`` in the cluster ``system_identifier``."""
    return f"{system_identifier}/{database}"


def read_identity(connection: Connection) -> str:
    """The identity of the database ``connection`` is on.

    Raises:
        SourceIdentityError: The role may not execute ``pg_control_system()`` (Postgres grants
            it to every role unless an administrator revoked it; pg_monitor does not give it).
    """
    role, database = connection.execute(_WHO).one()
    try:
        system_identifier = connection.execute(_SYSTEM).scalar_one()
    except ProgrammingError as exc:
        if getattr(exc.orig, "sqlstate", None) != INSUFFICIENT_PRIVILEGE:
            raise
        raise SourceIdentityError(
            f"role {role} may not read the identity of database {database} "
            f"(pg_control_system()): as a superuser, in {database}, run GRANT EXECUTE ON "
            f"FUNCTION pg_control_system() TO {role} (pg_monitor does not include it), or use "
            "a role that may"
        ) from exc
    return identity(system_identifier, database)


def database_identity(url: str | URL) -> str:
    """The identity of the database at ``url`` (one short connection).

    Raises:
        SourceIdentityError: As `read_identity`.
    """
    engine = engine_for(url, "once")
    try:
        with engine.connect() as connection:
            return read_identity(connection)
    finally:
        engine.dispose()


__all__ = ["SourceIdentityError", "database_identity", "identity", "read_identity"]
