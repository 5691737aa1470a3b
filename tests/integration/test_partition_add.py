"""Partitions added to an outbox topic under load, the runbook's way (`outboxkit cdc
add-partitions`: connector paused, consumers drained, position floors raised, partitions added,
connector resumed): every event applied once, and each key's events in the order they
committed, across the move of keys to the new partitions."""

from __future__ import annotations

import threading
from collections import defaultdict

from sqlalchemy import select

from cdc import partitions
from cdc.config import topic_for
from inbox import moves
from inbox.tables import watermarks
from tests.faults.test_spark_faults import consume_command
from tests.integration.test_topic_moves import (
    assert_audit_clean,
    start_driver,
    stop_driver,
    wait_applied,
)
from tests.jobs import effects
from tests.spark_helpers import effect_stats, publish


def test_partitions_added_under_load_apply_each_event_once_in_key_order(
    stack, engine, spark_effects_table, aggregate_type, tmp_path
):
    topic = topic_for(aggregate_type, topic_prefix=stack.settings.topic_prefix)
    consumer = f"grown-{aggregate_type[-6:]}"
    kafka = {"bootstrap.servers": stack.bootstrap_servers()}
    publish(engine, aggregate_type, 1_000, keys=16)
    command, env = consume_command(stack, consumer, aggregate_type, tmp_path / "cp")
    env["OUTBOXKIT_TEST_LEDGER"] = "1"  # for the audit
    driver = start_driver(command, env)
    try:
        wait_applied(engine, consumer, 1_000, driver)
        load = threading.Thread(
            target=publish,
            args=(engine, aggregate_type, 2_000),
            kwargs={"start": 1_000, "keys": 16, "per_tx": 20},
        )
        load.start()
        chosen = partitions.plan(kafka, topic, 6, stack.settings.connector_name)

        def applied():
            with engine.connect() as conn:
                rows = conn.execute(
                    select(watermarks.c.partition, watermarks.c.offset).where(
                        watermarks.c.consumer == consumer, watermarks.c.topic == topic
                    )
                ).all()
            return {int(p): int(o) for p, o in rows}

        partitions.add_partitions(
            stack.connect_client(),
            kafka,
            chosen,
            applied,
            drained=lambda: moves.raise_floors(
                engine, consumer, topic, chosen.after, [stack.settings.server_name]
            ),
            timeout=300,
        )
        load.join()
        publish(engine, aggregate_type, 1_000, start=3_000, keys=16)  # after the move
        wait_applied(engine, consumer, 4_000, driver)
    finally:
        stop_driver(driver)
    assert effect_stats(engine, consumer) == (4_000, 4_000)
    with engine.connect() as conn:
        rows = conn.execute(
            select(effects.c.key, effects.c.n)
            .where(effects.c.consumer == consumer)
            .order_by(effects.c.seq)
        ).all()
        grown = conn.execute(
            select(watermarks.c.partition, watermarks.c.offset).where(
                watermarks.c.consumer == consumer, watermarks.c.topic == topic
            )
        ).all()
    by_key = defaultdict(list)
    for key, n in rows:
        by_key[key].append(n)
    # Each key is written by one writer in increasing n: applied in that order.
    assert all(ns == sorted(ns) for ns in by_key.values()), "a key's events out of order"
    assert {int(p) for p, o in grown if o >= 0} >= {4, 5}, "no key moved to a new partition"
    assert_audit_clean(stack, engine, consumer, topic, on_topic=4_000)
