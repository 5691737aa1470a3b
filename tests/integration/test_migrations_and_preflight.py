"""Migrations on a fresh database; preflight checks and the Connect client on the real services."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import create_engine, inspect, text

from cdc.config import build_connector_config
from cdc.connect import ConnectError
from cdc.preflight import run_checks
from migrations import runner


def tables(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_upgrade_twice_then_downgrade(empty_database):
    assert runner.current(empty_database) is None
    runner.upgrade(empty_database)
    first = tables(empty_database)
    assert {"outbox", "outbox_heartbeat", runner.VERSION_TABLE} <= first
    runner.upgrade(empty_database)  # a second run changes nothing
    assert tables(empty_database) == first
    assert runner.current(empty_database) == runner.head()
    runner.downgrade(empty_database)
    assert tables(empty_database) <= {runner.VERSION_TABLE}
    assert runner.current(empty_database) is None


def test_the_window_arrays_are_stored_uncompressed(empty_database):
    """Migration 0010: pglz over a slice's arrays was most of the window's INSERT."""
    runner.upgrade(empty_database)
    engine = create_engine(empty_database)
    try:
        with engine.connect() as conn:
            storage = dict(
                conn.execute(
                    text(
                        "SELECT attname, attstorage FROM pg_attribute WHERE attrelid ="
                        " 'inbox_recent'::regclass AND attname IN ('event_ids', 'offsets')"
                    )
                ).all()
            )
    finally:
        engine.dispose()
    assert storage == {"event_ids": "e", "offsets": "e"}  # e: EXTERNAL, x: EXTENDED before
    runner.downgrade(empty_database)


def test_the_watermark_flag_of_parked_records_is_set_for_partitions_that_have_them(
    empty_database,
):
    """Migration 0011: a partition with parked records before the upgrade keeps its key lookup."""
    runner.upgrade(empty_database, "0010_inbox_recent_storage")
    engine = create_engine(empty_database)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    'INSERT INTO inbox_watermark (consumer, topic, "partition", "offset")'
                    " VALUES ('c', 't', 0, 5), ('c', 't', 1, 5)"
                )
            )
            conn.execute(
                text(
                    'INSERT INTO inbox_parked (consumer, topic, "partition", "offset", error,'
                    " attempts) VALUES ('c', 't', 1, 3, 'undecodable', 1)"
                )
            )
        runner.upgrade(empty_database)
        with engine.connect() as conn:
            flags = dict(
                conn.execute(text('SELECT "partition", any_parked FROM inbox_watermark')).all()
            )
    finally:
        engine.dispose()
    assert flags == {0: False, 1: True}
    runner.downgrade(empty_database)


def test_preflight_passes_on_the_stack_and_reports_slot_lag(stack, engine):
    s = stack.settings
    with engine.connect() as conn:
        checks = run_checks(
            conn, slot_name=s.slot_name, publication_name=s.publication_name, expect_slot=True
        )
    assert all(c.ok for c in checks), checks
    lag = next(c for c in checks if c.name == "slot lag")
    assert "active" in lag.detail and "bytes behind" in lag.detail
    with engine.connect() as conn:
        missing = run_checks(
            conn, slot_name="no_such_slot", publication_name="no_such_pub", expect_slot=True
        )
    failed = {c.name: c.detail for c in missing if not c.ok}
    assert "slot" in failed and "connector registered" in failed["slot"]
    assert "publication" in failed and "CREATE PUBLICATION" in failed["publication"]


def test_delete_mode_writes_through_the_migrated_function_and_says_when_it_is_missing(
    empty_database,
):
    from sqlalchemy.orm import Session

    from outbox import Outbox
    from outboxkit.kernel.errors import OutboxError

    runner.upgrade(empty_database, "0007_inbox_ledger")  # before the function
    engine = create_engine(empty_database)
    try:
        event = {"aggregate_type": "order", "aggregate_id": "o-1", "event_type": "OrderPlaced"}
        missing = pytest.raises(OutboxError, match=r"outbox_write_deleted.*outboxkit db upgrade")
        with missing, Session(engine) as session, session.begin():
            Outbox("delete").publish(session, payload={"n": 1}, **event)
        runner.upgrade(empty_database)
        with Session(engine) as session, session.begin():
            # Written at publish (not with COMMIT) to look at it: the function inserted and
            # deleted the row in the transaction, the WAL has the insert, the table nothing.
            sent = Outbox("delete", at_commit=False).publish(session, payload={"n": 2}, **event)
            inserted = session.execute(
                text(
                    "SELECT n_tup_ins, n_tup_del FROM pg_stat_xact_user_tables "
                    "WHERE relname = 'outbox'"
                )
            ).one()
            assert tuple(inserted) == (1, 1)
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM outbox")).scalar_one() == 0
        assert sent.payload == {"n": 2}
        runner.downgrade(empty_database, "0007_inbox_ledger")
        with engine.connect() as conn:
            found = conn.execute(text("SELECT to_regproc('outbox_write_deleted')")).scalar_one()
            assert found is None
    finally:
        engine.dispose()


def test_connect_client_reports_invalid_config_and_failed_task_trace(stack):
    client = stack.connect_client()
    name = f"broken-{uuid.uuid4().hex[:6]}"
    config = build_connector_config(stack.connector_settings(stack.database_url()))
    config.update({"publication.name": "no_such_pub", "slot.name": f"b_{uuid.uuid4().hex[:8]}"})
    # Password authentication does not tell an unknown role from a wrong password.
    with pytest.raises(
        ConnectError, match='password authentication failed for user "no_such_user"'
    ):
        client.put_config(name, {**config, "database.user": "no_such_user"})
    # A valid config whose task fails at run time: the publication does not exist.
    config["publication.autocreate.mode"] = "disabled"
    client.put_config(name, config)
    client.put_config(name, config)  # idempotent
    try:
        with pytest.raises(ConnectError, match=r"(?s)FAILED.*Publication autocreation is disabled"):
            client.wait_running(name, timeout=90)
        status = client.status(name)
        assert status is not None and status.failure is not None
        client.restart(name)
    finally:
        assert client.delete(name) is True
    assert client.status(name) is None
    assert client.delete(name) is False
    main = client.wait_running(stack.settings.connector_name, timeout=30)
    assert main.running
