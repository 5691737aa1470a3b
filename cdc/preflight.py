"""Preflight checks of a Postgres database for the outbox connector, with actionable messages."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.engine import Connection


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


def run_checks(
    connection: Connection,
    *,
    slot_name: str,
    publication_name: str,
    expect_slot: bool = False,
    max_lag_bytes: int = 1 << 30,
) -> list[Check]:
    """Every check; ``expect_slot`` is True once the connector has run (slot and publication exist)."""
    checks: list[Check] = []
    wal_level = _setting(connection, "wal_level")
    checks.append(
        Check(
            "wal_level",
            wal_level == "logical",
            f"wal_level is {wal_level!r}"
            + ("" if wal_level == "logical" else
               ": set wal_level=logical in postgresql.conf (or the managed service's parameter "
               "group, e.g. rds.logical_replication=1) and restart Postgres"),
        )
    )
    max_slots = int(_setting(connection, "max_replication_slots"))
    used_slots = int(connection.execute(text("SELECT count(*) FROM pg_replication_slots")).scalar_one())
    slot_exists = slot_lag(connection, slot_name) is not None
    free = max_slots - used_slots
    checks.append(
        Check(
            "replication slots",
            free > 0 or slot_exists,
            f"{used_slots} of {max_slots} used"
            + ("" if free > 0 or slot_exists else
               ": raise max_replication_slots or drop unused slots "
               "(SELECT pg_drop_replication_slot(name))"),
        )
    )
    max_senders = int(_setting(connection, "max_wal_senders"))
    senders = int(connection.execute(text("SELECT count(*) FROM pg_stat_replication")).scalar_one())
    checks.append(
        Check(
            "wal senders",
            senders < max_senders,
            f"{senders} of {max_senders} in use"
            + ("" if senders < max_senders else ": raise max_wal_senders"),
        )
    )
    pub = connection.execute(
        text("SELECT count(*) FROM pg_publication WHERE pubname = :p"), {"p": publication_name}
    ).scalar_one()
    checks.append(
        Check(
            "publication",
            bool(pub) or not expect_slot,
            f"publication {publication_name!r} " + ("exists" if pub else
            "is missing: the connector creates it when publication.autocreate.mode=filtered, "
            f"otherwise run CREATE PUBLICATION {publication_name} FOR TABLE public.outbox, "
            "public.outbox_heartbeat"),
        )
    )
    lag = slot_lag(connection, slot_name)
    if lag is None:
        checks.append(
            Check(
                "slot",
                not expect_slot,
                f"slot {slot_name!r} is missing"
                + (": is the connector registered and RUNNING?" if expect_slot else
                   " (created when the connector first starts)"),
            )
        )
    else:
        behind = lag.lag_bytes or 0
        checks.append(
            Check(
                "slot lag",
                behind <= max_lag_bytes,
                f"slot {slot_name!r} {'active' if lag.active else 'INACTIVE'}, {behind} bytes behind"
                + ("" if behind <= max_lag_bytes else
                   ": the slot pins WAL; restart the connector, or drop the slot if it is abandoned"),
            )
        )
    return checks


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
