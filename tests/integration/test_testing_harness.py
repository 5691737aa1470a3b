"""`outboxkit.testing.Harness` on a toy service and its handler, defined here: what a replay, a
re-send, a poison event, a reordering and a lost delivery come to through the real inbox, and the
harness clock firing a scheduled message."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Annotated, Any

import pytest
from fastapi import Depends, FastAPI
from pydantic import BaseModel
from pydantic_settings import SettingsConfigDict
from sqlalchemy import BigInteger, Column, Identity, MetaData, String, Table, select
from sqlalchemy.engine import Engine

import inbox
from outbox import Envelope, UnitOfWork
from outboxkit.kernel.wire.record import topic_for
from outboxkit.testing import Harness, partition_of
from outboxkit_workshop.devstack.stack import Stack
from service_template import Problem, ServiceSettings, create_app, unit_of_work
from service_template.app import service_router
from spark_consumers import Job

metadata = MetaData()
# Effects without a unique constraint: an event applied twice would show as two rows.
effects = Table(
    "toy_effects",
    metadata,
    Column("seq", BigInteger, Identity(), primary_key=True),
    Column("key", String, nullable=False),
    Column("text", String, nullable=False),
    Column("event_id", String, nullable=False),
)
TOPIC = topic_for("note")
POISON: set[str] = set()  # texts the handler refuses (a bug, fixed by emptying it)
LATER: set[str] = set()  # texts the handler cannot take yet (retried later)


class NotesSettings(ServiceSettings):
    model_config = SettingsConfigDict(
        env_prefix="NOTES_", env_nested_delimiter="__", extra="ignore"
    )
    name: str = "notes"


class Note(BaseModel):
    key: str
    text: str
    remind_in: float | None = None
    fail: bool = False


router = service_router()


@router.post("/notes", status_code=201)
def add_note(note: Note, uow: Annotated[UnitOfWork, Depends(unit_of_work)]) -> dict[str, Any]:
    payload = {"text": note.text}
    uow.publish(
        aggregate_type="note", aggregate_id=note.key, event_type="NoteAdded", payload=payload
    )
    if note.remind_in is not None:
        uow.schedule(
            aggregate_type="note",
            aggregate_id=note.key,
            event_type="NoteReminder",
            payload={"text": f"remember {note.text}"},
            delay=note.remind_in,
        )
    if note.fail:
        raise Problem(409, "refused after publishing: the transaction rolls back")
    return {"key": note.key}


def notes_app() -> FastAPI:
    """The toy service, its settings from NOTES_* as a deployment's would be."""
    return create_app(NotesSettings(), routers=[router])  # type: ignore[call-arg]


def record_note(event: Envelope, uow: UnitOfWork) -> None:
    if event.payload["text"] in LATER:
        raise inbox.RetryLater("the warehouse is closed", after=120)
    if event.payload["text"] in POISON:
        raise ValueError(f"cannot take {event.payload['text']!r}")
    row = {"key": event.aggregate_id, "text": event.payload["text"]}
    uow.session.execute(effects.insert().values(**row, event_id=str(event.event_id)))


NOTES_JOB = Job(
    name="notes",
    topics=(TOPIC,),
    consumer="notes",
    handlers={"NoteAdded": record_note, "NoteReminder": record_note},
    database_url="postgresql+psycopg://unused/unused",  # the harness applies to its own
    bootstrap_servers="unused:9092",
)


@pytest.fixture
def harness(stack: Stack) -> Iterator[Harness]:
    POISON.clear()
    LATER.clear()
    with Harness(
        stack.database_url(),
        services=[notes_app],
        jobs=[NOTES_JOB],
        env_prefixes=["notes"],
        fresh_database=True,
    ) as h:
        metadata.create_all(h.engine)
        yield h


def post(h: Harness, key: str, text: str, **more: Any) -> None:
    response = h.client("notes").post("/notes", json={"key": key, "text": text, **more})
    assert response.status_code == 201, response.text


def effect_rows(engine: Engine) -> list[tuple[str, str]]:
    with engine.connect() as conn:
        rows = conn.execute(select(effects.c.key, effects.c.text).order_by(effects.c.seq))
        return [(r.key, r.text) for r in rows]


def keys_on_two_partitions() -> tuple[str, str]:
    """Two keys the harness puts on different partitions (it hashes keys over 3)."""
    names = (f"k{n}" for n in itertools.count())
    first = next(names)
    other = next(k for k in names if partition_of(k.encode(), 3) != partition_of(b"k0", 3))
    return first, other


def test_a_replay_and_a_resend_are_applied_once(harness: Harness) -> None:
    post(harness, "a", "one")
    harness.settle()
    assert harness.redeliver(event_type="NoteAdded") == 1  # at its offset: a replay
    assert harness.redeliver(event_type="NoteAdded", new_offset=True) == 1  # a CDC re-send
    assert harness.actions() == {"apply": 1, "skip_replay": 1, "skip_duplicate": 1}
    assert effect_rows(harness.engine) == [("a", "one")]
    harness.assert_applied_once()


def test_a_poison_event_is_parked_and_holds_its_key_only(harness: Harness) -> None:
    POISON.add("bad")
    held, other = keys_on_two_partitions()
    post(harness, held, "bad")
    post(harness, held, "after bad")
    post(harness, other, "fine")
    harness.settle()
    assert harness.actions() == {"apply": 1, "park": 1, "hold": 1}
    assert effect_rows(harness.engine) == [(other, "fine")]
    parked = harness.parked("notes")
    assert [(p["key"], p["event_type"]) for p in parked] == [(held, "NoteAdded")] * 2
    assert "cannot take 'bad'" in parked[0]["error"]

    POISON.clear()  # the handler fixed: its key is redriven, in offset order
    record = harness.records(TOPIC)[0]
    redone = inbox.redrive(harness.inbox("notes"), TOPIC, record.partition, key=held)
    assert redone.applied == 2
    assert effect_rows(harness.engine) == [(other, "fine"), (held, "bad"), (held, "after bad")]
    harness.assert_applied_once()


def test_held_records_are_delivered_after_the_other_partitions(harness: Harness) -> None:
    late, early = keys_on_two_partitions()
    harness.hold(key=late)
    post(harness, late, "first written")
    post(harness, early, "second written")
    post(harness, late, "third written")
    harness.settle()
    assert effect_rows(harness.engine) == [(early, "second written")]
    harness.release_held()
    assert effect_rows(harness.engine) == [
        (early, "second written"),
        (late, "first written"),
        (late, "third written"),
    ]
    harness.assert_applied_once()


def test_a_lost_delivery_is_read_again_and_applied_once(harness: Harness) -> None:
    harness.drop(event_type="NoteAdded")
    post(harness, "a", "one")
    harness.settle()
    assert [d.kind for d in harness.deliveries] == ["lost", "read"]
    assert effect_rows(harness.engine) == [("a", "one")]
    harness.assert_applied_once()


def test_advance_releases_a_scheduled_message_when_due(harness: Harness) -> None:
    post(harness, "a", "one", remind_in=600)
    harness.settle()
    assert [e.event_type for e in harness.published()] == ["NoteAdded"]
    harness.advance(minutes=9)
    assert harness.published(event_type="NoteReminder") == []
    harness.advance(minutes=1, seconds=1)
    assert [e.payload for e in harness.published(event_type="NoteReminder")] == [
        {"text": "remember one"}
    ]
    assert effect_rows(harness.engine) == [("a", "one"), ("a", "remember one")]
    harness.assert_applied_once()


def test_a_rolled_back_transaction_publishes_nothing(harness: Harness) -> None:
    response = harness.client("notes").post("/notes", json={"key": "a", "text": "x", "fail": True})
    assert response.status_code == 409
    assert harness.settle() == 0
    assert harness.published() == []


def test_advance_redrives_a_delayed_retry_when_due(harness: Harness) -> None:
    LATER.add("not yet")
    post(harness, "a", "not yet")
    harness.settle()
    assert effect_rows(harness.engine) == []
    assert [p["retry_at"] is not None for p in harness.parked()] == [True]
    LATER.clear()
    harness.advance(minutes=1)
    assert effect_rows(harness.engine) == []  # not due yet
    harness.advance(minutes=1, seconds=1)
    assert effect_rows(harness.engine) == [("a", "not yet")]
    harness.assert_applied_once()


def test_the_harness_migrates_the_database_it_is_given(empty_database: str) -> None:
    with Harness(
        empty_database, services=[notes_app], jobs=[NOTES_JOB], env_prefixes=["notes"]
    ) as h:
        metadata.create_all(h.engine)
        post(h, "a", "one")
        h.settle()
        assert effect_rows(h.engine) == [("a", "one")]
        h.assert_applied_once()
