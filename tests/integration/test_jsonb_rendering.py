"""`outboxkit.kernel.wire.jsonb.render` against the real Postgres, and record sizes against the
connector."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import Text, cast, delete, func, select, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from cdc.config import topic_for
from outbox import Outbox
from outbox.table import outbox_table
from outboxkit.kernel.envelope import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    MAX_HEADERS,
    MAX_HEADERS_BYTES,
    extra_headers,
    wire_size,
)
from outboxkit.kernel.wire import (
    HEADER_OVERHEAD_BYTES,
    RECORD_OVERHEAD_BYTES,
    SOURCE,
    SOURCE_HEADERS_BYTES,
    SOURCE_IDENTITY,
    SOURCE_POSITION,
)
from outboxkit.kernel.wire.jsonb import render, utf8_size
from outboxkit_workshop.devstack.stack import Stack
from tests.kafka import read_records
from tests.unit.test_jsonb import EXAMPLES

TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.fixture(scope="module")
def conn(engine: Engine) -> Iterator[Connection]:
    with engine.connect() as connection:
        yield connection


def postgres(conn: Connection, json_text: str) -> str:
    """What Postgres makes of ``json_text`` in a jsonb column, read back as text."""
    return conn.execute(text("SELECT CAST(:p AS jsonb)::text"), {"p": json_text}).scalar_one()


def compact(value: object) -> str:
    """The JSON publish inserts."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


@pytest.mark.parametrize(("value", "expected"), EXAMPLES)
def test_worked_examples_are_what_postgres_renders(conn, value, expected):
    assert postgres(conn, compact(value)) == expected == render(value)
    # The headers column is sent by SQLAlchemy's json.dumps (ASCII escapes, default separators).
    assert postgres(conn, json.dumps(value)) == expected


# Any character Postgres text can hold, and some that stress escaping: controls, quotes,
# backslashes, separators, multi-byte characters.
characters = st.characters(exclude_categories=("Cs",), exclude_characters="\x00")
tricky = st.sampled_from(list('\x01\x08\x0c\x1f\x7f"\\/\n\r\t,: \u2028é✓日\U0001f600'))
strings = st.text(characters | tricky, max_size=12)
floats = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(
    [5e-324, 1e-300, 1.5e-07, 1e-5, 1e-4, 1e16, 1e22, 1e300, -0.0, 1.7976931348623157e308]
)
integers = st.integers() | st.integers(min_value=-(10**60), max_value=10**60)
scalars = st.none() | st.booleans() | integers | floats | strings
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=6) | st.dictionaries(strings, children, max_size=6)
    ),
    max_leaves=40,
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_values)
@example({"x": [1e300] * 3, "aa": {"": -0.0, "b": 1.5e-07}, "é": "\x1f"})
def test_render_is_what_postgres_renders(conn, value):
    assert render(value) == postgres(conn, compact(value))


mixed_keys = st.dictionaries(
    strings
    | st.integers()
    | st.booleans()
    | st.none()
    | st.floats(allow_nan=False, allow_infinity=False),
    scalars,
    max_size=8,
)


@settings(max_examples=100, deadline=None)
@given(mixed_keys)
def test_non_string_keys_and_their_duplicates_render_as_postgres_keeps_them(conn, value):
    assert render(value) == postgres(conn, compact(value))


@pytest.mark.parametrize("value", ["a\x00b", {"k\x00": 1}, [{"d": "\x00"}]])
def test_postgres_refuses_nul_and_so_does_render(conn, value):
    with pytest.raises(ValueError, match="NUL"):
        render(value)
    with pytest.raises(DBAPIError, match="unsupported Unicode escape sequence"):
        postgres(conn, compact(value))
    conn.rollback()


def test_integers_at_and_past_numeric_range(conn):
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        largest = -(10**131_072 - 1)  # 131,072 nines
        assert render(largest) == postgres(conn, str(largest))
        with pytest.raises(ValueError, match="overflows"):
            render(10**131_072)
        with pytest.raises(DBAPIError, match="overflow"):
            postgres(conn, str(10**131_072))
        conn.rollback()
    finally:
        sys.set_int_max_str_digits(limit)


def record_bytes(record) -> int:
    """Key, value, and every header name and value of a record read from Kafka."""
    size = len(record.key or b"") + len(record.value or b"")
    return size + sum(len(name.encode()) + len(value or b"") for name, value in record.headers)


def published_row(engine: Engine, event_id):
    with engine.connect() as connection:
        return connection.execute(
            select(
                func.octet_length(cast(outbox_table.c.payload, Text)),
                cast(outbox_table.c.payload, Text),
                cast(outbox_table.c.headers, Text),
            ).where(outbox_table.c.id == event_id)
        ).one()


def publish(engine: Engine, aggregate_type: str, payload: object, headers: dict[str, str]):
    with Session(engine) as session, session.begin():
        return Outbox(mode="retain").publish(
            session,
            aggregate_type=aggregate_type,
            aggregate_id="agg-✓-1",
            event_type="Rendered",
            payload=payload,
            headers=headers,
        )


def read_one(stack: Stack, aggregate_type: str):
    (record,) = read_records(
        stack.bootstrap_servers(),
        [topic_for(aggregate_type)],
        until=lambda got: len(got) >= 1,
        timeout=90,
    )
    return record


def forget(engine: Engine, event_id) -> None:
    with engine.begin() as connection:
        connection.execute(delete(outbox_table).where(outbox_table.c.id == event_id))


def test_published_sizes_are_what_postgres_stores_and_kafka_carries(stack, engine, aggregate_type):
    payload = {"amount": 1e300, "tiny": 1.5e-07, "zero": -0.0, "bb": [1, {"y": "✓", "x": "\x1f"}]}
    headers = {"tenant": "acme", "zz": "東京", "a": "1", "traceparent": TP}
    sent = publish(engine, aggregate_type, payload, headers)
    value_text, headers_text = render(payload), render(extra_headers(sent))
    try:
        size, stored, stored_headers = published_row(engine, sent.event_id)
        assert (stored, size) == (value_text, utf8_size(value_text))
        assert stored_headers == headers_text
        record = read_one(stack, aggregate_type)
        assert record.value == value_text.encode()
        assert dict(record.headers)["headers"] == headers_text.encode()
        # id, eventType, aggregateType, traceparent, headers, schemaVersion; and the source's
        # three, whose size the estimate bounds (the connector's name is not known at publish)
        source = (SOURCE, SOURCE_POSITION, SOURCE_IDENTITY)
        placed = record._replace(headers=[(n, v) for n, v in record.headers if n not in source])
        assert len(placed.headers) == 6 and len(record.headers) == 9
        source_bytes = record_bytes(record) - record_bytes(placed) + 3 * HEADER_OVERHEAD_BYTES
        assert 0 < source_bytes <= SOURCE_HEADERS_BYTES
        framing = RECORD_OVERHEAD_BYTES + HEADER_OVERHEAD_BYTES * len(placed.headers)
        assert wire_size(sent, value_text, headers_text) == (
            record_bytes(placed) + framing + SOURCE_HEADERS_BYTES
        )
    finally:
        forget(engine, sent.event_id)


def test_a_record_at_every_default_limit_reaches_kafka(stack, engine, aggregate_type):
    """The issue's failure: a payload just under the limit grew past Kafka's on the wire."""
    names = [f"h{n:02}" for n in range(MAX_HEADERS)]
    headers = dict.fromkeys(names, "")
    headers[names[0]] = "x" * (MAX_HEADERS_BYTES - utf8_size(render(headers)))
    payload: dict[str, object] = {"floats": [1e300] * 2000, "pad": ""}
    payload["pad"] = "y" * (DEFAULT_MAX_PAYLOAD_BYTES - utf8_size(render(payload)))
    assert utf8_size(render(payload)) == DEFAULT_MAX_PAYLOAD_BYTES
    assert utf8_size(render(headers)) == MAX_HEADERS_BYTES
    sent = publish(engine, aggregate_type, payload, {**headers, "traceparent": TP})
    try:
        size = published_row(engine, sent.event_id)[0]
        assert size == DEFAULT_MAX_PAYLOAD_BYTES
        record = read_one(stack, aggregate_type)
        assert len(record.value) == DEFAULT_MAX_PAYLOAD_BYTES
        assert json.loads(record.value)["floats"][0] == 10**300
    finally:
        forget(engine, sent.event_id)
