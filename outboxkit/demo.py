"""The main job: bring the stack up and show events travelling from a transaction to Kafka."""

from __future__ import annotations

import json
import uuid

from rich.console import Console
from rich.table import Table
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

import outbox
from cdc.config import topic_for
from devstack.stack import Stack
from outbox.record import decode
from outboxkit.kafka import read_records
from outboxkit.settings import Settings


def run_demo(settings: Settings, *, keep_running: bool = False, events: int = 5) -> int:
    """Start the stack, commit ``events`` events (and roll one back), print what reached Kafka."""
    console = Console()
    stack = Stack(settings, echo=lambda line: console.print(f"[dim]{line}[/dim]"))
    console.rule("outboxkit demo: outbox -> Debezium on Kafka Connect -> Kafka")
    try:
        with console.status("starting Postgres, broker, Kafka Connect + Debezium..."):
            stack.up()
        aggregate_type = f"demo_order_{uuid.uuid4().hex[:6]}"
        engine = create_engine(stack.database_url())
        for n in range(events):
            with Session(engine) as session, session.begin():
                outbox.publish(
                    session,
                    aggregate_type=aggregate_type,
                    aggregate_id=f"order-{n % 2}",
                    event_type="OrderPlaced",
                    payload={"order": n, "amount": 10 * (n + 1), "note": None},
                )
        with Session(engine) as session, session.begin():
            outbox.publish(
                session,
                aggregate_type=aggregate_type,
                aggregate_id="order-x",
                event_type="OrderPlaced",
                payload={"rolled": "back"},
            )
            session.rollback()
        console.print(
            f"committed {events} events (and rolled one back) on {topic_for(aggregate_type)}"
        )
        with console.status("waiting for the events on Kafka..."):
            records = read_records(
                stack.bootstrap_servers(),
                [topic_for(aggregate_type)],
                until=lambda got: len(got) >= events,
                timeout=120,
                idle_after_done=2.0,
            )
        table = Table(title="what reached Kafka")
        for column in ("partition", "offset", "key", "event type", "payload", "event id"):
            table.add_column(column)
        for record in sorted(records, key=lambda r: (r.partition, r.offset)):
            env = decode(record.key, record.value, record.headers, record.timestamp_ms)
            table.add_row(
                str(record.partition),
                str(record.offset),
                env.aggregate_id,
                env.event_type,
                json.dumps(env.payload),
                str(env.event_id)[:8],
            )
        console.print(table)
        rolled_back = [r for r in records if r.key == b"order-x"]
        ok = len(records) == events and not rolled_back
        console.print(
            f"{len(records)} records for {events} committed events; "
            f"rolled-back event on Kafka: {'YES (bug)' if rolled_back else 'no'}"
        )
        if keep_running:
            console.print(f"stack left running: {stack.status()}")
        return 0 if ok else 1
    finally:
        if not keep_running:
            with console.status("stopping the stack..."):
                stack.down()
