"""Preflight checks of a Postgres database for the outbox connector, with actionable messages."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.engine import Connection

from cdc.connect import ConnectorStatus
from cdc.health import Diagnosis, describe


@dataclass(frozen=True)
class Check:
    """One check: its name, whether it passed, and what to do when it did not."""

    name: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class SlotLag:
    """A replication slot and how much WAL it holds back."""

    slot_name: str
    active: bool
    lag_bytes: int | None


def _setting(connection: Connection, name: str) -> str:
    return str(connection.execute(text("SELECT current_setting(:n)"), {"n": name}).scalar_one())


def slot_lag(connection: Connection, slot_name: str) -> SlotLag | None:
    """How far the slot's confirmed position is behind the current WAL position, in bytes."""
    row = connection.execute(
        text(
            "SELECT active, pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint "
            "FROM pg_replication_slots WHERE slot_name = :s"
        ),
        {"s": slot_name},
    ).first()
    if row is None:
        return None
    return SlotLag(slot_name=slot_name, active=bool(row[0]), lag_bytes=row[1])


def database_slots(connection: Connection) -> list[SlotLag]:
    """The logical replication slots of the connected database and how far each is behind."""
    rows = connection.execute(
        text(
            "SELECT slot_name, active, "
            "pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint "
            "FROM pg_replication_slots "
            "WHERE database = current_database() AND slot_type = 'logical' ORDER BY slot_name"
        )
    ).all()
    return [
        SlotLag(slot_name=name, active=bool(active), lag_bytes=lag) for name, active, lag in rows
    ]


def _check(name: str, ok: bool, detail: str, fix: str) -> Check:
    """A check whose detail carries the fix only when it failed."""
    return Check(name, ok, detail if ok else f"{detail}: {fix}")


def _count(connection: Connection, sql: str, **params: str) -> int:
    return int(connection.execute(text(sql), params).scalar_one())


def run_checks(
    connection: Connection,
    *,
    slot_name: str,
    publication_name: str,
    expect_slot: bool = False,
    max_lag_bytes: int = 1 << 30,
) -> list[Check]:
    """Every check; ``expect_slot`` once the connector has run (slot and publication exist)."""
    wal_level = _setting(connection, "wal_level")
    max_slots = int(_setting(connection, "max_replication_slots"))
    used_slots = _count(connection, "SELECT count(*) FROM pg_replication_slots")
    max_senders = int(_setting(connection, "max_wal_senders"))
    senders = _count(connection, "SELECT count(*) FROM pg_stat_replication")
    has_pub = _count(
        connection, "SELECT count(*) FROM pg_publication WHERE pubname = :p", p=publication_name
    )
    lag = slot_lag(connection, slot_name)
    checks = [
        _check(
            "wal_level",
            wal_level == "logical",
            f"wal_level is {wal_level!r}",
            "set wal_level=logical (managed services: their logical replication parameter, "
            "e.g. rds.logical_replication=1) and restart Postgres",
        ),
        _check(
            "replication slots",
            used_slots < max_slots or lag is not None,
            f"{used_slots} of {max_slots} used",
            "raise max_replication_slots or drop unused slots (pg_drop_replication_slot)",
        ),
        _check(
            "wal senders",
            senders < max_senders,
            f"{senders} of {max_senders} in use",
            "raise max_wal_senders",
        ),
        _check(
            "publication",
            bool(has_pub) or not expect_slot,
            f"publication {publication_name!r} " + ("exists" if has_pub else _absent(expect_slot)),
            "the connector creates it when publication.autocreate.mode=filtered; otherwise run "
            f"CREATE PUBLICATION {publication_name} FOR TABLE public.outbox, "
            "public.outbox_heartbeat",
        ),
    ]
    if lag is None:
        checks.append(
            _check(
                "slot",
                not expect_slot,
                f"slot {slot_name!r} {_absent(expect_slot)}",
                "is the connector registered and RUNNING?",
            )
        )
    else:
        behind = lag.lag_bytes or 0
        checks.append(
            _check(
                "slot lag",
                behind <= max_lag_bytes,
                f"slot {slot_name!r} {'active' if lag.active else 'INACTIVE'}, "
                f"{behind} bytes behind",
                "the slot pins WAL: restart the connector, or drop the slot if it is abandoned",
            )
        )
    return checks


def connector_check(
    name: str,
    status: ConnectorStatus | None,
    diagnosis: Diagnosis | None,
    *,
    expect_running: bool = False,
) -> Check:
    """The connector's state from Kafka Connect; a FAILED task with its reason and way out."""
    if diagnosis is not None:
        first, *rest = describe(name, diagnosis.as_dict())  # first: "connector NAME: task..."
        return Check(f"connector {name}", False, "\n".join([first.split(": ", 1)[1], *rest]))
    if status is None:
        return _check(
            f"connector {name}",
            not expect_running,
            "not registered",
            "register it (outboxkit dev stack up) or set OUTBOXKIT_CONNECTOR_NAME",
        )
    tasks = ", ".join(f"task {t} {state}" for t, state, _ in status.tasks) or "no tasks"
    return Check(f"connector {name}", True, f"{status.state} ({tasks})")


def drop_slot(connection: Connection, slot_name: str) -> bool:
    """Drop a logical replication slot if it exists and no one is attached; True if dropped."""
    row = connection.execute(
        text("SELECT active_pid FROM pg_replication_slots WHERE slot_name = :s"), {"s": slot_name}
    ).first()
    if row is None:
        return False
    if row[0] is not None:
        connection.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": row[0]})
    connection.execute(text("SELECT pg_drop_replication_slot(:s)"), {"s": slot_name})
    return True


def _absent(expected: bool) -> str:
    """How a publication or slot the connector creates on its first start reads when absent:
    missing where it should exist by now, else not created yet."""
    return (
        "is missing"
        if expected
        else "not created yet (the connector creates it on its first start)"
    )
