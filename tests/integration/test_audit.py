"""`outboxkit audit` on the real broker and database: events on a topic sorted into applied,
duplicate, parked, pending and lost against the consumer's inbox and ledger."""

from __future__ import annotations

import uuid
from dataclasses import replace

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from sqlalchemy import delete, insert, select
from sqlalchemy.engine import Engine

from inbox import Inbox
from inbox.tables import ledger
from outboxkit_workshop.devstack.stack import Stack
from spark_consumers.audit import audit
from spark_consumers.job import Job
from tests.kafka import read_records


def produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes, str | None]]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result()
    producer = Producer({"bootstrap.servers": bootstrap})
    for key, value, event_id in records:
        headers = [("eventType", b"Tick"), ("aggregateType", b"t")]
        if event_id is not None:
            headers.insert(0, ("id", event_id.encode()))
        producer.produce(topic, value, key, headers=headers)
    assert producer.flush(30) == 0


def test_audit_tells_applied_duplicate_parked_pending_and_lost_apart(stack: Stack, engine: Engine):
    bootstrap, topic = stack.bootstrap_servers(), f"it-audit-{uuid.uuid4().hex[:8]}"
    ids = [str(uuid.uuid4()) for _ in range(10)]
    rows = [(f"k{i}".encode(), b'{"n": 1}', ids[i]) for i in range(6)]
    rows.append((b"k1", b'{"n": 1}', ids[1]))  # offset 6: a re-send of event 1
    rows.append((b"k7", b"{", str(uuid.uuid4())))  # offset 7: undecodable, parked
    rows += [(b"k8", b'{"n": 1}', ids[8]), (b"k9", b'{"n": 1}', ids[9])]  # never applied
    produce(bootstrap, topic, rows)
    records = read_records(bootstrap, [topic], until=lambda got: len(got) >= 10, timeout=60)

    consumer = f"audit-{uuid.uuid4().hex[:6]}"
    inbox = Inbox(engine, consumer, {"Tick": lambda event, uow: None}, window=100, ledger=True)
    inbox.apply_partition(records[:8])
    job = Job(
        name="audit",
        topics=(topic,),
        consumer=consumer,
        handlers={},
        database_url="unused",
        bootstrap_servers=bootstrap,
        ledger=True,
    )
    with engine.connect() as conn:
        before = audit(job, conn)
    assert before.ok
    [partition] = before.partitions
    assert (partition.watermark, partition.end, partition.events) == (7, 10, 9)
    assert partition.counts == {
        "applied": 6,
        "duplicate": 0,
        "parked": 1,
        "skipped": 0,
        "pending": 2,
        "lost": 0,
    }

    # Event 3's effect vanishes from the ledger (lost); event 4 is applied a second time.
    with engine.begin() as conn:
        conn.execute(
            delete(ledger).where(ledger.c.consumer == consumer, ledger.c.event_id == ids[3])
        )
        again = conn.execute(
            select(ledger.c.topic, ledger.c.partition, ledger.c.offset, ledger.c.event_id).where(
                ledger.c.consumer == consumer, ledger.c.event_id == ids[4]
            )
        ).one()
        conn.execute(insert(ledger).values(consumer=consumer, **again._asdict()))
    with engine.connect() as conn:
        after = audit(job, conn)
    assert not after.ok
    [partition] = after.partitions
    assert (partition.counts["lost"], partition.counts["duplicate"]) == (1, 1)
    assert partition.examples == {"lost": [ids[3]], "duplicate": [ids[4]]}
    assert partition.applied_at == {ids[4]: [again.offset, again.offset]}  # one record, twice
    assert partition.counts["applied"] == 4

    # A consumer without a ledger: the watermark covers what it passed, lost is not counted.
    blind = f"audit-{uuid.uuid4().hex[:6]}"
    Inbox(engine, blind, {"Tick": lambda event, uow: None}).apply_partition(records[:8])
    with engine.connect() as conn:
        unknown = audit(replace(job, consumer=blind, ledger=False), conn)
    assert not unknown.exact and not unknown.ok
    assert unknown.partitions[0].counts["applied"] == 6
    assert unknown.total("lost") == 0
