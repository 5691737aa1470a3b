"""A live rename of an outbox connector's source under load, the operator's way (`outboxkit cdc
apply --rename-source`): Debezium keeps its offsets per source name (``topic.prefix``), so under
the new name it starts from the replication slot's confirmed position and publishes the tail it
had not confirmed again, under a name the consumer's inbox has not seen. A running consumer job
applies every event once, and records of both names reach the topic.

The connector renamed is the test's own (its own outbox database, slot and source name, on the
session's Connect), deleted afterwards: the session's connector is never renamed, because a
rename back to a name whose stored offsets the slot has moved past fails its task."""

from __future__ import annotations

import contextlib
import io
import json
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, func, pool, select

from cdc.config import topic_for
from cdc.settings import CdcSettings, masked
from inbox.tables import watermarks
from outboxkit import cli
from outboxkit.kernel.wire import SOURCE, SOURCE_POSITION
from outboxkit.kernel.wire.record import KafkaRecord, header_map
from outboxkit_workshop.devstack.stack import Stack
from tests.faults.test_spark_faults import consume_command
from tests.integration.test_connector_failure import own_connector
from tests.integration.test_doctor import team_settings
from tests.integration.test_topic_moves import (
    assert_audit_clean,
    start_driver,
    stop_driver,
    wait_applied,
)
from tests.jobs import effects
from tests.kafka import read_records
from tests.spark_helpers import effect_stats, publish

pytestmark = [pytest.mark.integration, pytest.mark.spark]
EVENTS = 4_000


@pytest.fixture
def source(stack: Stack, empty_database: str, tmp_path: Path) -> Iterator[Stack]:
    """An outbox connector of the test's own on the session's Connect (its own database, slot,
    publication and source name), routing to the usual topic prefix."""
    yield from own_connector(
        stack, empty_database, tmp_path / "source", "rename", stack.settings.topic_prefix
    )


def cdc_environment(stack: Stack, nowhere: Path) -> dict[str, str]:
    """The stack's connector as the OUTBOXKIT_* variables an operator sets for `outboxkit cdc
    apply` (`test_doctor.team_settings`, spelt as variables): no state file."""
    settings = team_settings(stack, stack_dir=nowhere)
    env = {}
    for name, field in CdcSettings.model_fields.items():
        value = getattr(settings, name)
        if name == "kafka_security" or (value is None and field.default is None):
            continue  # the stack's broker: no SASL/TLS
        env[f"OUTBOXKIT_{name.upper()}"] = env_value(value)
    return env


def env_value(value: object) -> str:
    """A setting's value as its environment variable spells it ("": none)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return json.dumps([str(item) for item in value])
    return str(value)


def cdc_apply(*args: str) -> str:
    """`outboxkit cdc apply ARGS` in this process, on the variables set; its output."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["cdc", "apply", *args])
    assert code == 0, f"cdc apply {' '.join(args)} exited {code}:\n{out.getvalue()}{err.getvalue()}"
    return out.getvalue()


def trickle(outbox: Any, aggregate_type: str, halfway: threading.Event) -> None:
    """2,000 events (n 1,000..2,999, 16 keys, transactions of 20) in 20 rounds with a pause
    after each, so the load lasts several seconds; ``halfway`` is set after the tenth."""
    for step in range(20):
        publish(outbox, aggregate_type, 100, start=1_000 + 100 * step, keys=16, per_tx=20)
        if step == 9:
            halfway.set()
        time.sleep(0.3)


def topic_records(bootstrap: str, topic: str) -> list[KafkaRecord]:
    """The topic's committed records, read from its start until every event is among them."""
    return read_records(
        bootstrap,
        [topic],
        until=lambda got: len({header_map(r.headers).get("id") for r in got}) >= EVENTS,
        timeout=120,
    )


def ids_by_source(records: list[KafkaRecord]) -> dict[str, Counter[str]]:
    """Per source name on the records, how many records carry each event id."""
    found: dict[str, Counter[str]] = defaultdict(Counter)
    for record in records:
        headers = header_map(record.headers)
        found[headers.get(SOURCE, "?")][headers.get("id", "?")] += 1
    return found


def first_positions(records: list[KafkaRecord], source: str) -> list[str]:
    """The positions of each partition's first record under ``source`` (for the report)."""
    first: dict[int, str] = {}
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        headers = header_map(record.headers)
        if headers.get(SOURCE) == source and record.partition not in first:
            first[record.partition] = f"p{record.partition}@{record.offset}: " + headers.get(
                SOURCE_POSITION, "-"
            )
    return list(first.values())


def applied_twice(engine: Any, consumer: str) -> list[tuple[str, int]]:
    """The event ids whose effect was applied more than once, with their counts."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(effects.c.event_id, func.count())
            .where(effects.c.consumer == consumer)
            .group_by(effects.c.event_id)
            .having(func.count() > 1)
        ).all()
    return [(str(event_id), int(count)) for event_id, count in rows]


def watermark_rows(engine: Any, consumer: str, topic: str) -> list[Any]:
    with engine.connect() as conn:
        return list(
            conn.execute(
                select(watermarks)
                .where(watermarks.c.consumer == consumer, watermarks.c.topic == topic)
                .order_by(watermarks.c.partition)
            ).all()
        )


def test_a_source_renamed_under_load_applies_each_event_once(
    stack, source, engine, spark_effects_table, aggregate_type, tmp_path, monkeypatch
):
    topic = topic_for(aggregate_type, topic_prefix=stack.settings.topic_prefix)
    consumer = f"renamed-{aggregate_type[-6:]}"
    before = source.settings.server_name
    after = f"{before}_r"
    for variable, value in cdc_environment(source, tmp_path / "no-stack").items():
        monkeypatch.setenv(variable, value)
    client = source.connect_client()
    name = source.settings.connector_name
    running = {k: v for k, v in (client.get_config(name) or {}).items() if k != "name"}
    client.close()
    # The variables describe the running connector: the rename changes its name, nothing else.
    assert json.loads(cdc_apply("--dry-run")) == masked(running)
    outbox = create_engine(source.database_url(), poolclass=pool.NullPool)
    try:
        checkpoint = tmp_path / "cp"
        rename_under_load(stack, outbox, engine, aggregate_type, consumer, after, checkpoint)
    finally:
        outbox.dispose()
    check_each_event_once(stack, engine, consumer, topic, before, after)
    # Back to the first name (the variables still say it): Debezium would resume from that
    # name's stored offsets, which the slot has moved past, and its task would fail. Refused.
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["cdc", "apply", "--rename-source"])
    assert code == 2, out.getvalue() + err.getvalue()
    assert f"stored offsets under the source name {before!r}" in err.getvalue()
    client = source.connect_client()
    try:
        assert (client.get_config(name) or {}).get("topic.prefix") == after  # untouched
    finally:
        client.close()


def rename_under_load(
    stack, outbox, engine, aggregate_type: str, consumer: str, after: str, checkpoint: Path
) -> None:
    """1,000 events applied, then the rename to ``after`` while 2,000 more are written to the
    ``outbox`` database, then 1,000 more: the consumer job running all along applies all
    4,000 (its inbox in ``engine``'s database)."""
    publish(outbox, aggregate_type, 1_000, keys=16)
    command, env = consume_command(stack, consumer, aggregate_type, checkpoint)
    env["OUTBOXKIT_TEST_LEDGER"] = "1"  # for the audit
    driver = start_driver(command, env)
    try:
        wait_applied(engine, consumer, 1_000, driver)
        halfway = threading.Event()
        with ThreadPoolExecutor(1) as pool:
            load = pool.submit(trickle, outbox, aggregate_type, halfway)
            halfway.wait(120)
            assert not load.done(), load.exception() or "the load ended before the rename"
            with pytest.MonkeyPatch.context() as renamed:
                renamed.setenv("OUTBOXKIT_SERVER_NAME", after)
                print(cdc_apply("--rename-source"), "load still running:", not load.done())
            load.result()
        publish(outbox, aggregate_type, 1_000, start=3_000, keys=16)  # after the rename
        wait_applied(engine, consumer, EVENTS, driver)
        time.sleep(3)  # a late duplicate would show now
    finally:
        stop_driver(driver)


def check_each_event_once(stack, engine, consumer: str, topic: str, before: str, after: str):
    """Every event applied once; both names on the topic and in the inbox's positions."""
    records = topic_records(stack.bootstrap_servers(), topic)
    by_source = ids_by_source(records)
    rows = watermark_rows(engine, consumer, topic)
    resent = set(by_source[before]) & set(by_source[after])
    report = {
        "records per source": {s: sum(c.values()) for s, c in by_source.items()},
        "events per source": {s: len(c) for s, c in by_source.items()},
        "events under both names": len(resent),
        f"first positions under {after}": first_positions(records, after),
        "watermarks": [(r.partition, r.offset, r.sources, r.stopped) for r in rows],
    }
    print(json.dumps(report, indent=1, default=str))
    twice = applied_twice(engine, consumer)
    stats = effect_stats(engine, consumer)
    assert stats == (EVENTS, EVENTS), {
        "applied twice": [(e, n, [s for s in by_source if e in by_source[s]]) for e, n in twice],
        **report,
    }
    assert {before, after} <= set(by_source), report
    assert len(set().union(*by_source.values())) == EVENTS, report
    assert all(r.stopped is None for r in rows), report
    # The renamed source keeps its database's key (its identity is unchanged): its re-sends
    # and its new events are judged by the positions it had under its first name.
    assert set().union(*(r.sources for r in rows)) == {before}, report
    assert_audit_clean(stack, engine, consumer, topic, on_topic=EVENTS)
