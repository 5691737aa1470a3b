"""What two outbox connectors on one Connect cluster must not share (pure, no I/O).

The inbox judges a record by its source's name and its position in that source's WAL. That is
identity only while each name belongs to one database and each database's outbox is captured
under one name: two databases under one `topic.prefix` interleave positions that mean nothing
to each other (the lower database's events look like replays), and a second connector on the
same outbox, or a connector renamed, publishes every unconfirmed event again under a name the
inbox has not seen. `outboxkit cdc apply` refuses each of these before Connect runs it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from cdc.config import CONNECTOR_CLASS


@dataclass(frozen=True)
class Capture:
    """What one connector's config captures, as far as the config says.

    Attributes:
        name: The connector's name.
        source: Its source name (``topic.prefix``), carried in each event's headers.
        database: The database's host (lower-cased), port and name.
        tables: The tables it captures.
    """

    name: str
    source: str
    database: tuple[str, str, str]
    tables: frozenset[str]

    def where(self) -> str:
        host, port, name = self.database
        return f"database {name} at {host}:{port}"


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
    return Capture(name, config.get("topic.prefix", ""), database, tables)


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
        if other.source == new.source and other.database != new.database:
            found.append(
                f"connector {other.name} already uses the source name {new.source!r} for "
                f"{other.where()}: two databases under one name make their positions "
                f"meaningless to the inbox; give {new.name} a name of its own "
                "(OUTBOXKIT_SERVER_NAME)"
            )
        shared = sorted(new.tables & other.tables)
        if other.database == new.database and shared:
            found.append(
                f"connector {other.name} already captures {', '.join(shared)} of "
                f"{other.where()}: a second connector would publish each event again under "
                f"another source name; delete one of them, or capture other tables"
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
        "that: those events are then caught only by the consumers' id windows"
    )
