"""What two outbox connectors on one Connect cluster must not share (pure, no I/O).

The inbox judges a record by its source's name and its position in that source's WAL. That is
identity only while each name belongs to one database and each database's outbox is captured
under one name: two databases under one `topic.prefix` interleave positions that mean nothing
to each other (the lower database's events look like replays), and a second connector on the
same outbox, or a connector renamed, publishes every unconfirmed event again under a name the
inbox has not seen. `outboxkit cdc apply` refuses each of these before Connect runs it.

A connector config that writes the database's identity (`cdc.identity`) is compared by it: one
database under two host names (``localhost``, ``127.0.0.1``) is one database, and a database
restored or replaced under a running connector is another one. Configs without it are compared
by host, port and database name."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from cdc.config import CONNECTOR_CLASS, source_identity_of


@dataclass(frozen=True)
class Capture:
    """What one connector's config captures, as far as the config says.

    Attributes:
        name: The connector's name.
        source: Its source name (``topic.prefix``), carried in each event's headers.
        database: The database's host (lower-cased), port and name.
        tables: The tables it captures.
        identity: The database's identity its records carry (None: the config writes none).
    """

    name: str
    source: str
    database: tuple[str, str, str]
    tables: frozenset[str]
    identity: str | None = None

    def where(self) -> str:
        host, port, name = self.database
        known = f" (identity {self.identity})" if self.identity else ""
        return f"database {name} at {host}:{port}{known}"

    def same_database(self, other: Capture) -> bool:
        """Whether both capture one database: by identity when both have one."""
        if self.identity and other.identity:
            return self.identity == other.identity
        return self.database == other.database


def capture_of(name: str, config: Mapping[str, str]) -> Capture | None:
    """The capture of a connector config (None: not a Debezium Postgres connector)."""
    if config.get("connector.class") != CONNECTOR_CLASS:
        return None
    database = (
        config.get("database.hostname", "").lower(),
        config.get("database.port", "5432"),
        config.get("database.dbname", ""),
    )
    tables = frozenset(t.strip() for t in config.get("table.include.list", "").split(",") if t)
    source = config.get("topic.prefix", "")
    return Capture(name, source, database, tables, source_identity_of(config))


def captures(configs: Mapping[str, Mapping[str, str] | None]) -> list[Capture]:
    """The captures of a cluster's connectors, by name (those that are not outbox-like left
    out)."""
    found = (capture_of(name, config) for name, config in configs.items() if config)
    return [capture for capture in found if capture is not None]


def collisions(new: Capture, others: Iterable[Capture]) -> list[str]:
    """Why ``new`` cannot run beside ``others`` (the cluster's other connectors), one line each
    with its fix; empty when it can."""
    found = []
    for other in others:
        if other.name == new.name:
            continue
        same = new.same_database(other)
        shared = sorted(new.tables & other.tables)
        if same and shared:
            host, port, _ = new.database
            alias = f" (through {host}:{port})" if other.database != new.database else ""
            found.append(
                f"connector {other.name} already captures {', '.join(shared)} of "
                f"{other.where()}, which {new.name} would capture again{alias}: a second "
                "connector would publish each event again under another source name; delete "
                "one of them, or capture other tables"
            )
        elif other.source == new.source:
            why = (
                "two connectors under one name interleave their positions"
                if same
                else "two databases under one name make their positions meaningless to the inbox"
            )
            found.append(
                f"connector {other.name} already uses the source name {new.source!r} for "
                f"{other.where()}: {why}; give {new.name} a name of its own "
                "(OUTBOXKIT_SERVER_NAME)"
            )
    return found


def renamed(current: Mapping[str, str] | None, new: Capture) -> str | None:
    """Why changing the running connector's source name is refused (None: not a rename)."""
    before = None if current is None else current.get("topic.prefix")
    if before is None or before == new.source:
        return None
    return (
        f"connector {new.name} publishes as source {before!r}; under {new.source!r} it would "
        "publish the events it has not confirmed again under a name the consumers' inboxes "
        f"have not seen. Keep OUTBOXKIT_SERVER_NAME={before}, or pass --rename-source to accept "
        "that: the consumers' inboxes then know them by the database's identity (the "
        "connector's sourceIdentity header), or, without it, only by their id windows"
    )


def replaced(current: Mapping[str, str] | None, new: Capture) -> str | None:
    """Why keeping the running connector's source name for another database is refused (None:
    the same database, a new source name, or an identity not known on either side)."""
    before = None if current is None else source_identity_of(current)
    if current is None or before is None or new.identity is None or before == new.identity:
        return None
    if current.get("topic.prefix") != new.source:
        return None
    return (
        f"connector {new.name} captured the database {before} as source {new.source!r}; "
        f"{new.where()} is another one (restored, re-created or replaced): its WAL positions "
        "are not the old database's, and the consumers' inboxes would take its events for ones "
        "they applied. Capture it as a new source: set OUTBOXKIT_SERVER_NAME to a new name and "
        "run `outboxkit cdc apply --rename-source`"
    )


def reused(current: Mapping[str, str] | None, new: Capture, stored: Iterable[str]) -> str | None:
    """Why renaming the running connector's source back to a name it stored offsets under is
    refused (None: no rename, or a name it never used): Debezium would resume from that name's
    offsets, which the replication slot has moved past, and its task fails."""
    if current is None or current.get("topic.prefix", "") == new.source:
        return None
    if new.source not in set(stored):
        return None
    return (
        f"connector {new.name} stored offsets under the source name {new.source!r} before: "
        "Debezium would resume from them, behind its replication slot, and its task would fail. "
        "Choose a source name it never used (OUTBOXKIT_SERVER_NAME), or stop the connector and "
        "delete its offsets for that name first (Kafka Connect's offsets API)"
    )
