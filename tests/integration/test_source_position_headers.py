"""Every record the connector writes names its source and its position there: the headers
`outboxkit.kernel.wire.SOURCE` (Debezium's ``source.name``, the connector's topic.prefix) and
`outboxkit.kernel.wire.SOURCE_POSITION` (``source.sequence``, ``["<last commit LSN>","<change
LSN>"]``), copied by outboxkit's transform (cdc/java/smt) before the EventRouter
drops the change event. On the real stack, in every outbox mode: the positions grow in the order the
records stand in their partition, also when two transactions interleave and commit in the other
order than they first wrote (their change LSNs then go backwards; the commit LSN first does not).
And every record carries the database's identity (`outboxkit.kernel.wire.SOURCE_IDENTITY`,
Postgres's system identifier and the database's name), inserted last by Kafka's InsertHeader."""

from __future__ import annotations

import itertools
import json

from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

import outbox
from outbox.publish import MODES
from outboxkit.kernel.wire import SOURCE, SOURCE_IDENTITY, SOURCE_POSITION
from outboxkit.kernel.wire.record import KafkaRecord
from outboxkit_workshop.devstack.stack import Stack
from tests.integration.test_outbox_modes import read, unit

AGGREGATE = "one"  # one key: every record in one partition, in the order the WAL committed


def at_once(session: Session, mode: str) -> outbox.UnitOfWork:
    """A unit writing each event when published (delete mode otherwise writes it with COMMIT),
    so two open transactions really interleave in the WAL."""
    return outbox.UnitOfWork(session, outbox.Outbox(mode, at_commit=False))


def position(text: str) -> tuple[int, ...]:
    """Debezium's sequence text as a tuple of ints (null: 0)."""
    items = json.loads(text)
    assert isinstance(items, list) and len(items) == 2, text
    assert all(item is None or (isinstance(item, str) and item.isdigit()) for item in items), text
    return tuple(0 if item is None else int(item) for item in items)


def headers(record: KafkaRecord) -> dict[str, list[bytes | None]]:
    found: dict[str, list[bytes | None]] = {}
    for name, value in record.headers:
        found.setdefault(name, []).append(value)
    return found


def step_of(record: KafkaRecord) -> str:
    return str(json.loads(record.value or b"")["step"])


def test_every_record_carries_its_source_and_a_growing_position(
    stack: Stack, engine, aggregate_type
):
    order: list[str] = []  # the steps in the order they committed

    def publish(uow: outbox.UnitOfWork, step: str) -> None:
        uow.publish(
            aggregate_type=aggregate_type,
            aggregate_id=AGGREGATE,
            event_type="Step",
            payload={"step": step},
        )

    for mode in MODES:
        with Session(engine) as session, session.begin():  # the mode's usual path
            uow = unit(session, mode)
            publish(uow, f"{mode}-alone-0")
            publish(uow, f"{mode}-alone-1")
        order += [f"{mode}-alone-0", f"{mode}-alone-1"]
        # Two connections: ``first`` writes first and commits last.
        with Session(engine) as first, Session(engine) as second:
            publish(at_once(first, mode), f"{mode}-first-0")
            publish(at_once(second, mode), f"{mode}-second-0")
            publish(at_once(first, mode), f"{mode}-first-1")
            second.commit()
            first.commit()
        order += [f"{mode}-second-0", f"{mode}-first-0", f"{mode}-first-1"]

    records = read(stack, aggregate_type, len(order))
    assert len(records) == len(order)
    assert len({r.partition for r in records}) == 1
    records.sort(key=lambda r: r.offset)
    assert [step_of(r) for r in records] == order  # commit order

    positions = []
    for record in records:
        found = headers(record)
        assert len(found.get(SOURCE, [])) == 1 and len(found.get(SOURCE_POSITION, [])) == 1
        assert found[SOURCE] == [stack.settings.server_name.encode()], found
        text = found[SOURCE_POSITION][0]
        assert text is not None
        positions.append(position(text.decode()))
        print(step_of(record), found[SOURCE], found[SOURCE_POSITION])
    assert all(a < b for a, b in itertools.pairwise(positions)), positions
    # The interleaving happened: in each mode a later record has a smaller change LSN.
    for index, step in enumerate(order):
        if step.endswith("-first-0"):
            assert positions[index][1] < positions[index - 1][1], (step, positions)
            assert positions[index][0] > positions[index - 1][0], (step, positions)


def test_every_record_carries_the_identity_of_its_database(
    stack: Stack, engine: Engine, aggregate_type: str
) -> None:
    with engine.connect() as conn:  # read here as Postgres gives it, not through cdc.identity
        system_identifier, database = conn.execute(
            text("SELECT system_identifier, current_database() FROM pg_control_system()")
        ).one()
    expected = f"{system_identifier}/{database}".encode()
    for mode in MODES:
        with Session(engine) as session, session.begin():
            unit(session, mode).publish(
                aggregate_type=aggregate_type, aggregate_id="a", event_type="E", payload={}
            )
    records = read(stack, aggregate_type, len(MODES))
    assert len(records) == len(MODES)
    for record in records:
        assert headers(record).get(SOURCE_IDENTITY) == [expected], record.headers
