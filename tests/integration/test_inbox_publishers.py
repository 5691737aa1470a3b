"""Who may publish what, on the real Postgres through the public `Inbox` API: a consumer told
that only the payments service publishes payment events parks a payment event another service
wrote in its own outbox (routing follows its aggregatetype column, which that service's role
can write), and one that says no source, with the reason; the other events go on. A redrive
under the same rule leaves it parked; once the rule names that source, a redrive applies it,
once."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import select

from inbox import EXACTLY_ONCE_WINDOW, Inbox
from inbox.publishers import Publishers
from inbox.redrives import redrive
from inbox.tables import parked
from outboxkit.kernel.wire.record import KafkaRecord
from tests.integration.test_inbox_apply import effect_counts, effects_md, recorder
from tests.integration.test_inbox_positions import event as positioned


@pytest.fixture(scope="module", autouse=True)
def effects_table(engine):
    effects_md.create_all(engine)


def event(topic: str, offset: int, source: str | None, key: bytes = b"o-1") -> KafkaRecord:
    """A PaymentCaptured at ``offset`` from ``source`` (None: no source name)."""
    kind = (b"payment", b"PaymentCaptured")  # its id and position follow from offset + 10
    return positioned(topic, offset, offset + 10, source=source, key=key, kind=kind)


def test_a_payment_event_of_another_source_is_parked_until_the_rule_names_it(engine) -> None:
    consumer, topic = f"pub-{uuid.uuid4().hex[:8]}", f"outbox.event.payment-{uuid.uuid4().hex[:6]}"
    rule = Publishers.of({"payment": ["payments"]})
    inbox = Inbox(engine, consumer, recorder(consumer), window=EXACTLY_ONCE_WINDOW, publishers=rule)
    records = [
        event(topic, 0, "payments", b"o-1"),
        event(topic, 1, "orders", b"o-2"),  # forged: the orders service's own outbox row
        event(topic, 2, None, b"o-3"),  # no source name: who wrote it cannot be told
        event(topic, 3, "payments", b"o-4"),
    ]
    inbox.apply_partition(records)
    counts = effect_counts(engine, consumer)
    applied = {str(uuid.uuid5(uuid.NAMESPACE_OID, f"{topic}-{o + 10}")) for o in (0, 3)}
    assert set(counts) == applied and set(counts.values()) == {1}
    with engine.connect() as conn:
        errors = dict(
            conn.execute(
                select(parked.c.offset, parked.c.error).where(parked.c.consumer == consumer)
            ).all()
        )
    assert errors[1] == (
        "refused: source 'orders' may not publish 'payment' events (only payments)"
    )
    assert "without a source name" in errors[2]
    # The same rule: a redrive leaves them parked, still saying why.
    redrive(inbox, topic, 0)
    assert len(effect_counts(engine, consumer)) == 2
    # The rule names the orders service too: its record is applied, once; the unnamed one not.
    wider = Inbox(
        engine,
        consumer,
        recorder(consumer),
        window=EXACTLY_ONCE_WINDOW,
        publishers=Publishers.of({"payment": ["payments", "orders"]}),
    )
    redrive(wider, topic, 0)
    redrive(wider, topic, 0)
    counts = effect_counts(engine, consumer)
    assert len(counts) == 3 and set(counts.values()) == {1}
    with engine.connect() as conn:
        left = conn.execute(select(parked.c.offset).where(parked.c.consumer == consumer)).all()
    assert [o for (o,) in left] == [2]


def test_types_the_rule_does_not_name_are_taken_from_any_source() -> None:
    from outboxkit.kernel.wire.record import read

    rule = Publishers.of({"shipment": ["shipping"]})
    assert rule.refusal(read(event("t", 0, "orders"))) is None
    assert Publishers().refusal(read(event("t", 0, None))) is None
    assert rule.read(event("t", 0, "orders")).refused is None
