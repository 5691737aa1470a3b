"""Delete mode's write at commit (`outbox.at_commit`), on the stack's Postgres: the row travels
with COMMIT, a savepoint or transaction rolled back takes exactly what it published, events keep
their order across modes, what fails at commit fails the whole transaction, and an engine not
attached writes at publish with no listener of ours."""

from __future__ import annotations

import gc
import json
import logging
import tempfile
import time
import uuid
from collections.abc import Iterator

import pytest
from psycopg import pq
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

from migrations import runner
from outbox import Outbox, OutboxError, at_commit, attach_at_commit
from outboxkit.kernel.engines import engine_for
from outboxkit.kernel.errors import is_transient

# Every row the outbox ever inserted, in order, though delete mode deletes it at once.
SEEN = """
CREATE TABLE outbox_seen (n bigserial PRIMARY KEY, LIKE outbox);
CREATE FUNCTION outbox_seen() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO outbox_seen (id, aggregatetype, aggregateid, type, payload, traceparent,
                             headers, schema_version, created_at)
    VALUES (NEW.id, NEW.aggregatetype, NEW.aggregateid, NEW.type, NEW.payload, NEW.traceparent,
            NEW.headers, NEW.schema_version, NEW.created_at);
    RETURN NEW;
END $$;
CREATE TRIGGER outbox_seen AFTER INSERT ON outbox FOR EACH ROW EXECUTE FUNCTION outbox_seen();
CREATE TABLE business (id text PRIMARY KEY);
"""


@pytest.fixture
def db(empty_database: str) -> Iterator[Engine]:
    """The engine under test, a service's engine attached as the service template attaches it:
    ONE pooled connection, so that what a transaction leaves on it (a failed transaction,
    waiting rows) meets the next one, and a connection never given back shows as a timeout."""
    runner.upgrade(empty_database)
    engine = engine_for(empty_database, "service", pool_size=1, max_overflow=0, pool_timeout=5)
    attach_at_commit(engine)
    with engine.begin() as conn:
        conn.exec_driver_sql(SEEN)
    yield engine
    engine.dispose()


def publish(session: Session, aggregate_id: str, payload: object = None, mode="delete") -> None:
    Outbox(mode).publish(
        session,
        aggregate_type="order",
        aggregate_id=aggregate_id,
        event_type="Placed",
        payload={"n": aggregate_id} if payload is None else payload,
    )


def observed(engine: Engine, sql: str) -> list[str]:
    """What another connection (not the pool under test) reads."""
    observer = create_engine(engine.url, poolclass=NullPool)
    with observer.connect() as conn:
        return list(conn.scalars(text(sql)))


def seen(engine: Engine) -> list[str]:
    return observed(engine, "SELECT aggregateid FROM outbox_seen ORDER BY n")


def business(engine: Engine) -> list[str]:
    return observed(engine, "SELECT id FROM business ORDER BY id")


def test_the_row_travels_with_commit_and_arrives_intact(db):
    """One message carries the outbox's call and COMMIT; values with quotes, backslashes,
    non-ASCII text and JSON escapes arrive as published; the table stays empty."""
    tricky = {"q": 'it\'s \\ "quoted"', "t": "Grüße 🚀", "e": "tab\there\nnewline", "n": [1.5]}
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as trace:
        with Session(db) as session, session.begin():
            session.execute(text("INSERT INTO business VALUES ('b1')"))
            publish(session, "o-'1'", tricky)
            driver = session.connection().connection.driver_connection
            assert seen(db) == []  # nothing written yet, even by this transaction
            driver.pgconn.trace(trace.fileno())
            driver.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
        driver.pgconn.untrace()
        trace.seek(0)
        sent = [line for line in trace if line.split("\t")[0] == "F"]
    assert len(sent) == 1 and "outbox_write_deleted" in sent[0] and "COMMIT" in sent[0], sent
    with db.connect() as conn:  # the pool's connection, back and idle
        row = conn.execute(text("SELECT aggregateid, payload FROM outbox_seen")).one()
        assert tuple(row) == ("o-'1'", json.loads(json.dumps(tricky)))
        assert conn.execute(text("SELECT count(*) FROM outbox")).scalar_one() == 0
    assert business(db) == ["b1"]


def test_a_transaction_that_only_publishes_sends_its_events_alone_and_atomically(db):
    """No statement went before the events, so no BEGIN was sent: the message is the calls
    alone (one implicit transaction, all or nothing), without a COMMIT that would draw the
    server's "no transaction in progress" warning."""
    notices: list[str] = []
    with Session(db) as session, session.begin():
        driver = session.connection().connection.driver_connection
        driver.add_notice_handler(lambda d: notices.append(d.message_primary))
        publish(session, "alone-1")
        publish(session, "alone-2")
    assert notices == []
    assert seen(db) == ["alone-1", "alone-2"]
    with Session(db) as session, session.begin():  # the second call fails: neither is kept
        publish(session, "alone-3")
        publish(session, "alone-4")
        pending = session.connection().connection.info[at_commit._PENDING]
        pending.calls[-1] = b"SELECT 1/0"
        with pytest.raises(Exception, match="division by zero"):
            session.commit()
    assert seen(db) == ["alone-1", "alone-2"] and notices == []


def test_savepoints_and_rollbacks_take_exactly_what_they_published(db):
    with Session(db) as session, session.begin():
        publish(session, "a")
        with pytest.raises(RuntimeError), session.begin_nested():
            publish(session, "b")  # rolled back with its savepoint
            raise RuntimeError("handler failed")
        with session.begin_nested():
            publish(session, "c")
            with pytest.raises(RuntimeError), session.begin_nested():
                publish(session, "d")
                raise RuntimeError("inner failed")
            publish(session, "e")
        publish(session, "f")  # after a released savepoint
    with Session(db) as session, session.begin():  # a rolled-back transaction: nothing
        publish(session, "g")
        session.rollback()
    with Session(db) as session:  # closed without commit: nothing
        session.begin()
        publish(session, "h")
    with Session(db) as session, session.begin():  # the next transaction on the connection
        publish(session, "i")
    assert seen(db) == ["a", "c", "e", "f", "i"]


def test_publishing_no_events_writes_nothing(db):
    """A handler that has no replies publishes an empty list (as the saga's do)."""
    with Session(db) as session, session.begin():
        assert Outbox("delete").publish_many(session, []) == []
        publish(session, "after-nothing")
        assert Outbox("delete").publish_many(session, []) == []
    assert seen(db) == ["after-nothing"]


def test_events_keep_their_order_across_modes(db):
    """A write of another mode in the transaction writes the waiting rows first."""
    with Session(db) as session, session.begin():
        publish(session, "1")
        publish(session, "2", mode="retain")
        publish(session, "3")
        publish(session, "4", mode="retain")
    assert seen(db) == ["1", "2", "3", "4"]
    with Session(db) as session, session.begin():
        session.execute(text("DELETE FROM outbox"))


def test_a_write_failing_at_commit_fails_the_transaction(db):
    """The function missing (here: not on the search path) is found by COMMIT's message: the
    commit raises the publish's error and the business row is not kept."""
    failing = pytest.raises(OutboxError, match="outbox_write_deleted")
    with failing, Session(db) as session, session.begin():
        session.execute(text("INSERT INTO business VALUES ('lost')"))
        publish(session, "x")
        session.execute(text("SET LOCAL search_path TO pg_temp"))
    assert business(db) == [] and seen(db) == []
    with db.connect() as conn:  # a Connection's commit: SQLAlchemy will not roll it back
        conn.execute(text("INSERT INTO business VALUES ('lost-2')"))
        publish(Session(bind=conn), "x2")
        conn.execute(text("SET LOCAL search_path TO pg_temp"))
        with pytest.raises(OutboxError):
            conn.commit()
    with Session(db) as session, session.begin():  # the pool's connection is fine afterwards
        session.execute(text("INSERT INTO business VALUES ('kept')"))
        publish(session, "y")
    assert business(db) == ["kept"] and seen(db) == ["y"]


def test_a_connection_lost_before_commit_is_an_outage(db):
    """The server ends the session between publish and commit: the commit raises an error that
    `is_transient` calls an outage (answered 503, retried), and nothing is kept."""
    with pytest.raises(OperationalError) as raised, Session(db) as session, session.begin():
        session.execute(text("INSERT INTO business VALUES ('gone')"))
        publish(session, "z")
        pid = session.execute(text("SELECT pg_backend_pid()")).scalar_one()
        observed(db, f"SELECT pg_terminate_backend({int(pid)})::text")
    assert is_transient(raised.value)
    assert business(db) == [] and seen(db) == []
    with db.connect() as conn:  # a Connection's rollback after the loss, then the next one
        conn.execute(text("INSERT INTO business VALUES ('before-loss')"))
        pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
        observed(db, f"SELECT pg_terminate_backend({int(pid)})::text")
        with pytest.raises(OperationalError):
            conn.execute(text("SELECT 1"))
        conn.rollback()  # as a retry loop does: no PendingRollbackError
    with Session(db) as session, session.begin():
        publish(session, "after-loss")
    assert seen(db) == ["after-loss"] and business(db) == []


def test_the_write_at_publish_remains_available(db):
    """``at_commit=False`` writes the row at publish, visible to the transaction's statistics."""
    name = f"o-{uuid.uuid4().hex[:6]}"
    with Session(db) as session, session.begin():
        Outbox("delete", at_commit=False).publish(
            session, aggregate_type="order", aggregate_id=name, event_type="Placed", payload={}
        )
        assert seen(db) == []  # another connection does not see it yet
        mine = session.execute(text("SELECT count(*) FROM outbox_seen")).scalar_one()
        assert mine == 1
    assert seen(db) == [name]


def test_two_phase_transactions_carry_their_events(db):
    """A two-phase transaction committed without PREPARE (a plain COMMIT) and one rolled back."""
    with db.connect() as conn:
        twophase = conn.begin_twophase()
        publish(Session(bind=conn), "tp-committed")
        twophase.commit()
        twophase = conn.begin_twophase()
        publish(Session(bind=conn), "tp-rolled-back")
        twophase.rollback()
    assert seen(db) == ["tp-committed"]


def test_an_abandoned_session_gives_its_connection_back(db):
    """A session dropped without close after a publish: the waiting rows do not keep its
    connection alive (the pool's one connection is checked out again), nor are they written."""
    session = Session(db)
    publish(session, "abandoned")
    del session
    gc.collect()
    with Session(db) as session, session.begin():
        publish(session, "next")
    assert seen(db) == ["next"]


def test_a_sql_ascii_client_encoding_gets_utf8(db):
    """psycopg sends text as UTF-8 to a SQL_ASCII connection; so does the write at commit."""
    with Session(db) as session, session.begin():
        session.execute(text("SET LOCAL client_encoding TO 'SQL_ASCII'"))
        publish(session, "Grüße 🚀")
    assert seen(db) == ["Grüße 🚀"]


def test_an_engine_not_attached_writes_at_publish_and_keeps_no_listener(db, caplog):
    """The user's own engine, never attached: no listener of ours on it, its events written at
    publish (visible to the transaction, as with ``at_commit=False``), none lost, and one
    warning that says how to attach it; the attached engine beside it still writes at commit."""
    users = create_engine(db.url, poolclass=NullPool)
    assert not at_commit.is_attached(users)
    assert [n for n, fn in at_commit._LISTENERS if event.contains(users, n, fn)] == []
    with caplog.at_level(logging.WARNING, logger=at_commit.__name__):
        for name in ("own-1", "own-2"):
            with Session(users) as session, session.begin():
                publish(session, name)
                mine = session.execute(text("SELECT count(*) FROM outbox_seen")).scalar_one()
                assert mine == len(seen(db)) + 1  # written already, not yet committed
        with Session(db) as session, session.begin():
            publish(session, "attached")
            assert session.execute(text("SELECT count(*) FROM outbox_seen")).scalar_one() == 2
    assert seen(db) == ["own-1", "own-2", "attached"]
    warnings = [r.getMessage() for r in caplog.records if r.name == at_commit.__name__]
    assert len(warnings) == 1 and "attach_at_commit(engine)" in warnings[0], warnings
    users.dispose()


def xids(engine: Engine) -> tuple[set[str], set[str]]:
    """The (top-level) transactions that wrote the business rows and the outbox's rows, for
    rows written since `track_xids`."""
    return (
        set(observed(engine, "SELECT tx::text FROM business WHERE tx IS NOT NULL")),
        set(observed(engine, "SELECT tx::text FROM outbox_seen WHERE tx IS NOT NULL")),
    )


def track_xids(engine: Engine) -> None:
    with engine.begin() as conn:
        for table in ("business", "outbox_seen"):
            conn.exec_driver_sql(f"ALTER TABLE {table} ADD tx bigint DEFAULT txid_current()")


def test_a_publish_first_then_a_savepoint_or_another_mode_stays_in_its_transaction(db):
    """The first thing a transaction does is publish (nothing sent yet: psycopg sends BEGIN
    with the first statement); then a savepoint opens, or an event of another mode is written.
    The waiting row goes with a BEGIN: refused afterwards, the transaction keeps nothing;
    committed, its event and its rows are one transaction."""
    for then in ("savepoint", "retain", "message"):
        with pytest.raises(RuntimeError), Session(db) as session, session.begin():
            publish(session, f"{then}-refused")
            if then == "savepoint":
                session.begin_nested().commit()
            else:
                publish(session, f"{then}-other", mode=then)
            raise RuntimeError("the route refuses the request (422)")
        assert seen(db) == [] and business(db) == [], then
    track_xids(db)
    with Session(db) as session, session.begin():
        publish(session, "kept")
        with session.begin_nested():
            session.execute(text("INSERT INTO business VALUES ('kept')"))
    assert seen(db) == ["kept"] and business(db) == ["kept"]
    rows, events = xids(db)
    assert rows == events and len(rows) == 1


def test_savepoints_taken_as_sql_text_take_exactly_what_they_published(db):
    """SAVEPOINT and ROLLBACK TO SAVEPOINT as text, COMMIT and ROLLBACK as text, and psycopg's
    own transaction() inside a session: what a rolled-back savepoint or transaction published
    is not kept, what was published before it is."""
    with Session(db) as session, session.begin():
        publish(session, "t1")  # before the savepoint: kept
        session.execute(text("SAVEPOINT s1"))
        session.execute(text("INSERT INTO business VALUES ('rolled-back')"))
        publish(session, "t2")  # inside it: rolled back with it
        session.connection().exec_driver_sql("rollback to savepoint s1")
        publish(session, "t3")
        session.execute(text("SAVEPOINT s2"))
        publish(session, "t4")  # inside a released savepoint: kept
        session.execute(text("RELEASE SAVEPOINT s2"))
    assert seen(db) == ["t1", "t3", "t4"] and business(db) == []
    with Session(db) as session, session.begin():
        session.execute(text("INSERT INTO business VALUES ('b-psycopg')"))
        driver = session.connection().connection.driver_connection
        with pytest.raises(RuntimeError), driver.transaction():
            publish(session, "p1")  # inside psycopg's savepoint: written there, rolled back
            raise RuntimeError("handler failed")
        publish(session, "p2")  # waits for the commit
        with driver.transaction(), pytest.raises(OutboxError, match="begin_nested"):
            publish(session, "p3")  # would go ahead of p2: refused
        publish(session, "p4")
    assert seen(db)[3:] == ["p2", "p4"] and business(db) == ["b-psycopg"]
    with Session(db) as session, session.begin():
        session.execute(text("INSERT INTO business VALUES ('b-text-commit')"))
        publish(session, "c1")
        session.execute(text("COMMIT"))  # the row goes before it
        publish(session, "c2")
        session.execute(text("ROLLBACK"))  # the waiting row goes with it
    assert seen(db)[5:] == ["c1"] and "b-text-commit" in business(db)


def test_an_idle_transaction_ended_by_the_server_is_an_outage_at_commit(db):
    """The server ends a transaction left idle too long; the commit's message finds it gone:
    an outage (503, retried), the connection invalidated, nothing kept, the pool's next
    transaction fine."""
    with pytest.raises(DBAPIError) as raised, Session(db) as session, session.begin():
        session.execute(text("SET LOCAL idle_in_transaction_session_timeout = '100ms'"))
        session.execute(text("INSERT INTO business VALUES ('idle')"))
        publish(session, "idle")
        time.sleep(0.5)
    assert raised.value.connection_invalidated and is_transient(raised.value)
    assert business(db) == [] and seen(db) == []
    with Session(db) as session, session.begin():
        publish(session, "after-idle")
    assert seen(db) == ["after-idle"]


def test_a_client_encoding_set_after_publishing_is_the_one_written_in(db):
    """The calls are built again in the encoding the transaction set after publishing; an event
    that encoding cannot carry fails the commit, and the transaction keeps nothing."""
    with Session(db) as session, session.begin():
        publish(session, "Grüße")
        session.execute(text("SET LOCAL client_encoding TO 'LATIN1'"))
    assert seen(db) == ["Grüße"]
    failing = pytest.raises(OutboxError, match="client encoding LATIN1")
    with failing, Session(db) as session, session.begin():
        session.execute(text("INSERT INTO business VALUES ('rocket')"))
        publish(session, "🚀")
        session.execute(text("SET LOCAL client_encoding TO 'LATIN1'"))
    assert seen(db) == ["Grüße"] and business(db) == []
    with Session(db) as session, session.begin():
        publish(session, "after-encoding")
    assert seen(db) == ["Grüße", "after-encoding"]
