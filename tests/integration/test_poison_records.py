"""No record stops a partition, whatever its bytes: the apply loop on the real Postgres parks
what it cannot apply (raw bytes kept, readable copies bounded) and applies the good records of
other keys behind it; operators look at, skip and redrive parked records."""

from __future__ import annotations

import base64
import json
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import (
    Column,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Table,
    create_engine,
    func,
    select,
    text,
)
from sqlalchemy.engine import Engine

from inbox import BatchHandler, Inbox, operations
from inbox.decision import Action
from inbox.operations import parked_record
from inbox.tables import parked, skipped, watermarks
from migrations import runner
from outboxkit import cli
from outboxkit.kernel.wire.record import KafkaRecord, read

TOPIC = "poison"

effects_md = MetaData()
poison_effects = Table(
    "it_poison_effects",
    effects_md,
    Column("consumer", String, nullable=False),
    Column("key", String, nullable=False),
    Column("event_id", String, nullable=False),
)
# A handler bug Postgres only reports at COMMIT: a deferred foreign key.
poison_parents = Table("it_poison_parents", effects_md, Column("id", Integer, primary_key=True))
poison_children = Table(
    "it_poison_children",
    effects_md,
    Column("id", Integer, primary_key=True),
    Column(
        "parent",
        Integer,
        ForeignKey("it_poison_parents.id", deferrable=True, initially="DEFERRED"),
    ),
)


@pytest.fixture(scope="module", autouse=True)
def effects_table(engine: Engine) -> None:
    effects_md.create_all(engine)


def good(offset: int, key: str, event_id: str | None = None) -> KafkaRecord:
    eid = event_id or str(uuid.uuid4())
    headers = [("id", eid.encode()), ("eventType", b"Tick"), ("aggregateType", b"t")]
    return KafkaRecord(TOPIC, 0, offset, key.encode(), b'{"n": 1}', headers, 1_700_000_000_000)


def handler(consumer: str):
    def handle(envelope, uow):
        uow.session.execute(
            poison_effects.insert().values(
                consumer=consumer, key=envelope.aggregate_id, event_id=str(envelope.event_id)
            )
        )

    return handle


def applied_keys(engine: Engine, consumer: str) -> list[str]:
    with engine.connect() as conn:
        return list(
            conn.execute(
                select(poison_effects.c.key).where(poison_effects.c.consumer == consumer)
            ).scalars()
        )


def parked_rows(engine: Engine, consumer: str) -> list:
    with engine.connect() as conn:
        return conn.execute(
            select(parked).where(parked.c.consumer == consumer).order_by(parked.c.offset)
        ).all()


def watermark(engine: Engine, consumer: str) -> int:
    with engine.connect() as conn:
        return conn.execute(
            select(watermarks.c.offset).where(watermarks.c.consumer == consumer)
        ).scalar_one()


def headers_of(
    eid: str = "", event_type: bytes = b"Tick", **extra: bytes | None
) -> list[tuple[str, bytes | None]]:
    found: list[tuple[str, bytes | None]] = [
        ("id", (eid or str(uuid.uuid4())).encode()),
        ("eventType", event_type),
        ("aggregateType", b"t"),
    ]
    return found + list(extra.items())


DEEP = b"[" * 200_000 + b"]" * 200_000
# Records a buggy or hostile producer can write; each must be parked, none may stop the rest.
POISON: dict[str, tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]] = {
    "schema version not a number": (b"p1", b"{}", headers_of(schemaVersion=b"v2")),
    "schema version of 5000 digits": (b"p2", b"{}", headers_of(schemaVersion=b"9" * 5000)),
    "key not UTF-8": (b"\xff\xfe\x00", b"{}", headers_of()),
    "key with NUL": (b"a\x00b", b"{}", headers_of()),
    "key of 100 kB, value not JSON": (b"k" * 100_000, b"nope", headers_of()),
    "no key": (None, b"{}", headers_of()),
    "no value": (b"p3", None, headers_of()),
    "value nested 200,000 deep": (b"p4", DEEP, headers_of()),
    "value not JSON": (b"p5", b"\x00\x01\x02", headers_of()),
    "id not a UUID, 10 kB": (b"p6", b"{}", headers_of(eid="x" * 10_000)),
    "event type with NUL, 10 kB": (b"p7", b"{}", headers_of(event_type=b"\x00" * 10_000)),
    "event type not UTF-8": (b"p8", b"{}", headers_of(event_type=b"\xc3\x28")),
    "header name with NUL, aggregate type empty": (
        b"p9",
        b"{}",
        [*headers_of(), ("a\x00b", b"v"), ("aggregateType", b"")],
    ),
    "header value not UTF-8": (b"p10", b"{}", headers_of(traceparent=b"\xff")),
    "headers JSON nested deep": (b"p11", b"{}", headers_of(headers=DEEP)),
    "headers JSON with a number": (b"p12", b"{}", headers_of(headers=b'{"a": 1}')),
    "500 headers, the last id not a UUID": (
        b"p13",
        b"{}",
        headers_of() + [(f"h{i}", b"\x00" * 100) for i in range(500)] + [("id", b"\x00")],
    ),
    "no headers": (b"p14", b"{}", []),
    "null header values": (b"p15", b"{}", [("id", None), ("eventType", None)]),
}


def test_every_kind_of_poison_is_parked_and_the_good_records_behind_it_are_applied(engine):
    consumer = f"poison-{uuid.uuid4().hex[:8]}"
    inbox = Inbox(engine, consumer, {"Tick": handler(consumer)})
    batch: list[KafkaRecord] = []
    for n, (key, value, headers) in enumerate(POISON.values()):
        batch.append(KafkaRecord(TOPIC, 0, 2 * n, key, value, headers, 1))
        batch.append(good(2 * n + 1, f"good-{n}"))
    result = inbox.apply_partition(batch)

    assert result.count(Action.APPLY) == len(POISON)
    assert result.count(Action.PARK) == len(POISON)
    assert sorted(applied_keys(engine, consumer)) == sorted(f"good-{n}" for n in range(len(POISON)))
    assert watermark(engine, consumer) == batch[-1].offset
    rows = parked_rows(engine, consumer)
    assert [r.offset for r in rows] == [2 * n for n in range(len(POISON))]
    for row, (name, (key, value, headers)) in zip(rows, POISON.items(), strict=True):
        shown = operations.show(engine, row.id)
        assert shown is not None, name
        # The raw bytes are kept whole, the readable copies bounded and NUL-free.
        assert (shown["raw_key"], shown["raw_value"], shown["raw_headers"]) == (
            key,
            value,
            headers,
        ), name
        assert row.error and len(row.error) <= 4000, name
        assert row.key is None or (len(row.key) <= 1000 and "\x00" not in row.key), name
        assert all(len(v or "") <= 1000 for v in (row.headers or {}).values()), name


def test_a_parked_key_holds_its_later_records_whatever_its_bytes(engine):
    consumer = f"poison-{uuid.uuid4().hex[:8]}"
    inbox = Inbox(engine, consumer, {"Tick": handler(consumer)})
    long_key = "é" * 5000  # 10 kB: longer than a b-tree entry may be
    inbox.apply_partition(
        [KafkaRecord(TOPIC, 0, 0, long_key.encode(), b"nope", headers_of(), None)]
    )
    # Differs from the parked key only after the readable copy's cut: not held.
    near = "é" * 4999 + "x"
    result = inbox.apply_partition([good(1, long_key), good(2, near)])
    assert result.count(Action.HOLD) == 1 and result.count(Action.APPLY) == 1
    assert applied_keys(engine, consumer) == [near]


def test_skip_records_who_and_why_releases_the_key_and_replays_do_not_park_it_again(engine):
    consumer = f"poison-{uuid.uuid4().hex[:8]}"
    inbox = Inbox(engine, consumer, {"Tick": handler(consumer)})
    batch = [
        KafkaRecord(TOPIC, 0, 0, b"k", b"{", headers_of(), None),
        good(1, "k"),  # held behind offset 0
        good(2, "other"),
    ]
    inbox.apply_partition(batch)
    first, held = parked_rows(engine, consumer)
    assert held.error.startswith("held behind")

    moved = operations.skip(
        engine, first.id, by="ops@example", reason="truncated by a bad producer"
    )
    assert moved["offset"] == 0
    with engine.connect() as conn:  # the record held behind it is still parked
        flag = conn.execute(
            select(watermarks.c.any_parked).where(watermarks.c.consumer == consumer)
        ).scalar_one()
    assert flag is True
    with engine.connect() as conn:
        row = conn.execute(select(skipped).where(skipped.c.id == first.id)).one()
    assert (row.skipped_by, row.reason, bytes(row.payload)) == (
        "ops@example",
        "truncated by a bad producer",
        b"{",
    )
    assert operations.show(engine, first.id)["state"] == "skipped"
    with pytest.raises(LookupError):
        operations.skip(engine, first.id, by="ops", reason="twice")
    # The whole batch again (a replay): below the watermark, nothing is decoded or parked again.
    again = inbox.apply_partition(batch)
    assert again.count(Action.SKIP_REPLAY) == 3
    assert [r.offset for r in parked_rows(engine, consumer)] == [1]
    # The key is free: redrive applies the record held behind the skipped one.
    done = operations.redrive(inbox, TOPIC, 0, key="k")
    assert (done.applied, done.still_parked) == (1, 0)
    assert sorted(applied_keys(engine, consumer)) == ["k", "other"]
    with engine.connect() as conn:  # nothing parked is left: the slices skip the key lookup
        flag = conn.execute(
            select(watermarks.c.any_parked).where(watermarks.c.consumer == consumer)
        ).scalar_one()
    assert flag is False


def test_skipping_the_last_parked_record_clears_the_partitions_parked_flag(engine):
    consumer = f"poison-{uuid.uuid4().hex[:8]}"
    inbox = Inbox(engine, consumer, {"Tick": handler(consumer)})
    inbox.apply_partition([KafkaRecord(TOPIC, 0, 0, b"k", b"{", headers_of(), None)])
    (only,) = parked_rows(engine, consumer)
    query = select(watermarks.c.any_parked).where(watermarks.c.consumer == consumer)
    with engine.connect() as conn:
        assert conn.execute(query).scalar_one() is True
    operations.skip(engine, only.id, by="ops@example", reason="a bad producer")
    with engine.connect() as conn:
        assert conn.execute(query).scalar_one() is False
    # A later record of the key is applied (the key is no longer looked up, nor held).
    assert inbox.apply_partition([good(1, "k")]).count(Action.APPLY) == 1


def test_redrive_applies_the_raw_record_after_the_handler_is_fixed(engine):
    consumer = f"poison-{uuid.uuid4().hex[:8]}"
    weird_key = b"caf\xc3\xa9-\xe2\x82\xac"  # UTF-8, not ASCII
    record = KafkaRecord(TOPIC, 0, 0, weird_key, b'{"n": 1}', headers_of(event_type=b"New"), 5)
    Inbox(engine, consumer, {"Tick": handler(consumer)}).apply_partition([record])
    assert "unknown event type" in parked_rows(engine, consumer)[0].error
    fixed = Inbox(engine, consumer, {"Tick": handler(consumer), "New": handler(consumer)})
    done = operations.redrive(fixed, TOPIC, 0, key=weird_key.decode())
    assert done.applied == 1
    assert applied_keys(engine, consumer) == [weird_key.decode()]


def test_a_payload_the_handler_rejects_is_parked_unapplied_and_stays_parked_on_redrive(engine):
    """BatchHandler.validate: a payload it rejects is parked with its reason at once (one
    attempt, the handler never runs on it), holds its key, and redrive keeps it parked."""
    consumer = f"poison-{uuid.uuid4().hex[:8]}"
    seen: list[str] = []

    def apply(events, uow):
        seen.extend(e.aggregate_id for e in events)
        for event in events:
            handler(consumer)(event, uow)

    def validate(envelope):
        n = envelope.payload.get("n")
        return None if type(n) is int and n > 0 else f"n must be a positive int, got {n!r}"

    inbox = Inbox(engine, consumer, BatchHandler(apply, frozenset({"Tick"}), validate))
    negative = KafkaRecord(TOPIC, 0, 0, b"k", b'{"n": -3}', headers_of(), None)
    boolean = KafkaRecord(TOPIC, 0, 1, b"j", b'{"n": true}', headers_of(), None)
    result = inbox.apply_partition([negative, boolean, good(2, "k"), good(3, "other")])
    assert (result.count(Action.PARK), result.count(Action.HOLD)) == (2, 1)
    assert seen == applied_keys(engine, consumer) == ["other"]
    rows = parked_rows(engine, consumer)
    assert [(r.offset, r.error, r.attempts) for r in rows] == [
        (0, "invalid payload: n must be a positive int, got -3", 1),
        (1, "invalid payload: n must be a positive int, got True", 1),
        (2, "held behind a parked record of key k", 1),
    ]
    done = operations.redrive(inbox, TOPIC, 0)
    assert (done.applied, done.still_parked) == (0, 3)
    assert seen == applied_keys(engine, consumer) == ["other"]


def test_a_handler_breaking_a_deferred_constraint_parks_only_its_record(engine):
    consumer = f"poison-{uuid.uuid4().hex[:8]}"

    def handle(envelope, uow):
        if envelope.aggregate_id == "bad":  # a bug: its parent row is never written
            uow.session.execute(poison_children.insert().values(parent=-1))
        handler(consumer)(envelope, uow)

    inbox = Inbox(engine, consumer, {"Tick": handle})
    result = inbox.apply_partition([good(0, "a"), good(1, "bad"), good(2, "b")])
    assert (result.count(Action.APPLY), result.count(Action.PARK)) == (2, 1)
    assert sorted(applied_keys(engine, consumer)) == ["a", "b"]
    (row,) = parked_rows(engine, consumer)
    assert "ForeignKeyViolation" in row.error or "foreign key" in row.error


def test_when_the_transaction_keeps_failing_the_slice_is_parked_and_the_partition_moves_on(
    engine,
):
    consumer = f"poison-{uuid.uuid4().hex[:8]}"

    class Breaks(Inbox):
        """Commits that fail whatever the records: what no savepoint can catch."""

        def _transaction(self, records, *args, **kwargs):
            raise ValueError("something in the data the inbox does not know about")

    broken = Breaks(engine, consumer, {"Tick": handler(consumer)})
    result = broken.apply_partition([good(0, "a"), good(1, "b")])
    assert result.count(Action.PARK) == 2 and result.watermark == 1
    assert all("does not know about" in r.error for r in parked_rows(engine, consumer))
    # The next slice goes through; the parked keys wait for redrive, which applies them.
    fixed = Inbox(engine, consumer, {"Tick": handler(consumer)})
    assert fixed.apply_partition([good(2, "c")]).count(Action.APPLY) == 1
    assert operations.redrive(fixed, TOPIC, 0).applied == 2
    assert sorted(applied_keys(engine, consumer)) == ["a", "b", "c"]


header_names = st.text(st.characters(codec="utf-8"), max_size=20) | st.sampled_from(
    ["id", "eventType", "aggregateType", "schemaVersion", "headers", "traceparent"]
)
header_values = (
    st.none()
    | st.binary(max_size=300)
    | st.sampled_from(
        [b"Tick", b"t", b"1", b"{}", b"null", str(uuid.uuid4()).encode(), b"[" * 5000]
    )
)


@st.composite
def hostile_records(draw) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
    """Arbitrary bytes as key and value, and arbitrary header sets: sometimes a well-formed
    record with one field replaced, sometimes anything at all."""
    key = draw(st.none() | st.binary(max_size=3000))
    value = draw(st.none() | st.binary(max_size=2000) | st.just(b'{"n": 1}'))
    if draw(st.booleans()):
        headers = headers_of()
        index = draw(st.integers(0, len(headers) - 1))
        headers[index] = (headers[index][0], draw(header_values))
        headers += draw(st.lists(st.tuples(header_names, header_values), max_size=4))
    else:
        headers = draw(st.lists(st.tuples(header_names, header_values), max_size=12))
    return key, value, headers


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(records=st.lists(hostile_records(), min_size=1, max_size=4))
def test_property_no_bytes_stop_a_partition(engine, records):
    consumer = f"prop-{uuid.uuid4().hex[:8]}"
    inbox = Inbox(engine, consumer, {"Tick": handler(consumer)})
    batch: list[KafkaRecord] = []
    for key, value, headers in records:
        batch.append(KafkaRecord(TOPIC, 0, len(batch), key, value, headers, None))
        batch.append(good(len(batch), f"good-{len(batch)}"))
    result = inbox.apply_partition(batch)  # never raises

    goods = [r.key.decode() for r in batch[1::2]]
    applied = applied_keys(engine, consumer)
    assert set(goods) <= set(applied)  # every good record of another key is applied
    decided = result.count(Action.APPLY) + result.count(Action.PARK) + result.count(Action.HOLD)
    skipped_dupes = result.count(Action.SKIP_DUPLICATE)
    assert decided + skipped_dupes == len(batch)
    with engine.connect() as conn:
        parked_count = conn.execute(
            select(func.count()).select_from(parked).where(parked.c.consumer == consumer)
        ).scalar_one()
    assert len(applied) + parked_count + skipped_dupes == len(batch)
    assert watermark(engine, consumer) == len(batch) - 1


def test_parked_rows_keep_json_readable_copies(engine):
    """The readable copies are valid jsonb/text even for NUL and non-UTF-8 bytes."""
    consumer = f"poison-{uuid.uuid4().hex[:8]}"
    headers = headers_of(**{"n\x00ame": b"\x00\xff", "ok": b"fine"})
    Inbox(engine, consumer, {"Tick": handler(consumer)}).apply_partition(
        [KafkaRecord(TOPIC, 0, 0, b"\x00", b"{}", headers, None)]
    )
    with engine.connect() as conn:
        shown = conn.execute(
            text("SELECT key, headers::text FROM inbox_parked WHERE consumer = :c"),
            {"c": consumer},
        ).one()
    assert shown.key == "\\x00"
    assert json.loads(shown.headers)["n\\x00ame"] == "\\x00\\xff"


def test_migration_gives_parked_rows_their_raw_bytes_and_back(empty_database):
    runner.upgrade(empty_database, "0005_inbox_recent_slices")
    engine = create_engine(empty_database)
    eid = str(uuid.uuid4())
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    'INSERT INTO inbox_parked (consumer, topic, "partition", "offset", key,'
                    " event_id, event_type, headers, payload, error, attempts) VALUES"
                    " ('c', :t, 0, 4, 'kä', :e, 'Tick', :h, :p, 'handler failed', 3),"
                    " ('c', :t, 0, 5, NULL, NULL, NULL, NULL, NULL, 'undecodable', 1)"
                ),
                {
                    "t": TOPIC,
                    "e": eid,
                    "h": json.dumps({"id": eid, "eventType": "Tick", "aggregateType": "t"}),
                    "p": b'{"n": 1}',
                },
            )
        runner.upgrade(empty_database)
        first, second = parked_rows(engine, "c")
        assert bytes(first.raw_key) == "kä".encode()
        record = parked_record(first)
        assert sorted(record.headers) == sorted(
            [("aggregateType", b"t"), ("eventType", b"Tick"), ("id", eid.encode())]
        )
        assert read(record).envelope is not None  # redrive can apply it
        assert (second.raw_key, second.header_names) == (None, [])
        with engine.connect() as conn:
            indexes = conn.execute(
                text("SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_inbox_parked_key'")
            ).scalar_one()
        assert "md5(raw_key)" in indexes
        runner.downgrade(empty_database, "0005_inbox_recent_slices")
        with engine.connect() as conn:
            columns = set(
                conn.execute(
                    text(
                        "SELECT column_name FROM information_schema.columns"
                        " WHERE table_name = 'inbox_parked'"
                    )
                ).scalars()
            )
        assert "raw_key" not in columns and "key" in columns
    finally:
        engine.dispose()


def test_operator_commands_show_the_raw_bytes_and_skip_with_who_and_why(engine, capsys):
    consumer = f"poison-{uuid.uuid4().hex[:8]}"
    raw_key, raw_value = b"\xff\x00key", b'{"n": \x00'
    headers = headers_of(**{"x-bin": b"\x80\x81"})
    Inbox(engine, consumer, {"Tick": handler(consumer)}).apply_partition(
        [KafkaRecord(TOPIC, 0, 0, raw_key, raw_value, headers, None)]
    )
    url = engine.url.render_as_string(hide_password=False)
    assert cli.main(["inbox", "parked", "--url", url, "--consumer", consumer, "--json"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)
    assert listed["key"] == "\\xff\\x00key" and "raw_key" not in listed

    assert cli.main(["inbox", "show", "--url", url, "--id", str(listed["id"]), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert base64.b64decode(shown["raw_key"]) == raw_key
    assert base64.b64decode(shown["raw_value"]) == raw_value
    assert [(n, base64.b64decode(v)) for n, v in shown["raw_headers"]] == headers
    assert "key is not UTF-8" in shown["error"]

    assert cli.main(["inbox", "show", "--url", url, "--id", str(listed["id"])]) == 0
    assert repr(raw_key) in capsys.readouterr().out

    skip = ["inbox", "skip", "--url", url, "--id", str(listed["id"])]
    with pytest.raises(SystemExit) as refused:  # no reason given: a usage error
        cli.main(skip)
    assert refused.value.code == 2
    assert "--reason" in capsys.readouterr().err
    assert cli.main([*skip, "--reason", "test record", "--by", "ci"]) == 0
    assert cli.main([*skip, "--reason", "again"]) == 1  # gone from parked
    with engine.connect() as conn:
        row = conn.execute(select(skipped).where(skipped.c.id == listed["id"])).one()
    assert (row.skipped_by, row.reason, bytes(row.raw_key)) == ("ci", "test record", raw_key)
