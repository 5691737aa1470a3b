import json

import pytest
from sqlalchemy.orm import Session

from outbox import Outbox, OutboxSettings
from outboxkit.kernel.envelope import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    DEFAULT_MAX_RECORD_BYTES,
    MAX_AGGREGATE_TYPE_LENGTH,
    MAX_HEADER_NAME_LENGTH,
    MAX_HEADERS,
    MAX_HEADERS_BYTES,
    MAX_NAME_LENGTH,
    _header_values,
    encode_payload,
    extra_headers,
    make_envelope,
    wire_size,
)
from outboxkit.kernel.errors import InvalidEvent
from outboxkit.kernel.wire import (
    HEADER_COLUMNS,
    HEADER_OVERHEAD_BYTES,
    RECORD_OVERHEAD_BYTES,
    SOURCE_HEADERS_BYTES,
)
from outboxkit.kernel.wire.jsonb import render, utf8_size

TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def event(**overrides):
    fields = dict(
        aggregate_type="order", aggregate_id="o-1", event_type="OrderPlaced", payload={"a": 1}
    )
    fields.update(overrides)
    return make_envelope(**fields)


def test_valid_event_keeps_fields_and_encodes_payload_once():
    envelope, text = event(
        payload={"x": None, "u": "héllo ✓", "n": [1, {"a": None}]},
        headers={"traceparent": TP, "tenant": "t1"},
    )
    assert envelope.aggregate_type == "order" and envelope.aggregate_id == "o-1"
    assert envelope.traceparent == TP
    assert json.loads(text) == {"x": None, "u": "héllo ✓", "n": [1, {"a": None}]}
    assert "héllo" in text  # not \u-escaped: stays compact
    assert envelope.event_id.version == 4
    assert envelope.created_at.tzinfo is not None


def test_each_event_gets_its_own_id():
    assert event()[0].event_id != event()[0].event_id


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"aggregate_type": ""}, "aggregate_type must not be empty"),
        ({"aggregate_type": "   "}, "aggregate_type must not be empty"),
        ({"aggregate_type": "order/v2"}, "Kafka topic name"),
        ({"aggregate_type": "x" * 256}, "limit is 255"),
        ({"aggregate_id": ""}, "aggregate_id must not be empty"),
        ({"aggregate_id": "x" * 256}, "limit is 255"),
        ({"aggregate_id": 42}, "aggregate_id must be a string"),
        ({"event_type": ""}, "event_type must not be empty"),
        ({"payload": {"when": object()}}, "not JSON serialisable"),
        ({"payload": {1, 2}}, "not JSON serialisable"),
        ({"payload": float("nan")}, "not JSON serialisable"),
        ({"payload": "\u0000"}, "NUL"),
        ({"payload": {"k\u0000": 1}}, "NUL"),
        ({"payload": ["\ud800"]}, "surrogate"),
        ({"aggregate_id": "o\u00001"}, "aggregate_id contains a NUL"),
        ({"event_type": "Placed\u0000"}, "event_type contains a NUL"),
        ({"event_type": "\udc00"}, "event_type contains a lone surrogate"),
        ({"headers": {"n\u0000": "x"}}, "header name 'n.x00' contains a NUL"),
        ({"headers": {"n": "x\u0000"}}, "header 'n' contains a NUL"),
        ({"headers": {"n": "\ud800"}}, "header 'n' contains a lone surrogate"),
        ({"headers": {"h" * 256: "x"}}, "256 characters long; the limit is 255"),
        ({"headers": {"n": 1}}, "header 'n' must be a string"),
        ({"headers": {"": "x"}}, "header names must be non-empty"),
        ({"headers": ["a"]}, "mapping"),
        ({"headers": {"traceparent": "abc"}}, "W3C"),
    ],
)
def test_bad_input_is_rejected_with_a_clear_message(overrides, message):
    with pytest.raises(InvalidEvent, match=message):
        event(**overrides)


def test_payload_size_limit_is_enforced_in_bytes_not_characters():
    just_fits = "é" * ((DEFAULT_MAX_PAYLOAD_BYTES - 2) // 2)  # 2 bytes each + 2 quotes
    encode_payload(just_fits)
    with pytest.raises(InvalidEvent, match="2 over the limit of 900000"):
        encode_payload(just_fits + "é")


def test_a_literal_backslash_u0000_text_is_not_mistaken_for_nul():
    assert json.loads(encode_payload("\\u0000")) == "\\u0000"


def padded(size: int, **fields: object) -> dict[str, object]:
    """``fields`` and a "pad" string, rendered as jsonb to exactly ``size`` bytes."""
    payload = {**fields, "pad": ""}
    payload["pad"] = "y" * (size - utf8_size(render(payload)))
    assert utf8_size(render(payload)) == size
    return payload


def test_the_payload_limit_applies_to_its_jsonb_text():
    at_limit = padded(DEFAULT_MAX_PAYLOAD_BYTES, a=[1, 2, 3], b={"c": None})
    _, text = event(payload=at_limit)
    assert json.loads(text) == at_limit and len(text) < DEFAULT_MAX_PAYLOAD_BYTES  # compact
    over = padded(DEFAULT_MAX_PAYLOAD_BYTES + 1, a=[1, 2, 3], b={"c": None})
    with pytest.raises(InvalidEvent, match=r"900001 bytes as Postgres jsonb writes it.*1 over"):
        event(payload=over)


def test_floats_written_out_in_full_are_counted():
    attack = [{"x": 1e300}] * 3000  # 39 kB of compact JSON, 930 kB as jsonb
    assert len(json.dumps(attack, separators=(",", ":"))) < 40_000
    with pytest.raises(InvalidEvent, match=r"930000 bytes as Postgres jsonb.*floats out in full"):
        event(payload=attack)
    event(payload=[{"x": 1e300}] * 2900)  # 899,000 bytes


def test_max_payload_bytes_is_passed_through():
    with pytest.raises(
        InvalidEvent,
        match=r"12 bytes as Postgres jsonb.*2 over the limit of 10; as compact JSON it is 9\.",
    ):
        make_envelope(
            aggregate_type="a",
            aggregate_id="b",
            event_type="c",
            payload=[1, 2, 3, 4],
            max_payload_bytes=10,
        )


def many_headers(count: int, size: int | None = None) -> dict[str, str]:
    """``count`` headers, their jsonb text padded to ``size`` bytes when given."""
    headers = {f"h{n:03}": "" for n in range(count)}
    if size is not None:
        headers["h000"] = "x" * (size - utf8_size(render(headers)))
        assert utf8_size(render(headers)) == size
    return headers


def test_at_most_64_headers_besides_traceparent():
    envelope, _ = event(headers={**many_headers(MAX_HEADERS), "traceparent": TP})
    assert len(envelope.headers) == MAX_HEADERS + 1
    with pytest.raises(
        InvalidEvent, match="65 headers besides traceparent, 1 over the limit of 64"
    ):
        event(headers=many_headers(MAX_HEADERS + 1))


def test_header_names_of_255_characters_are_accepted():
    event(headers={"h" * MAX_HEADER_NAME_LENGTH: "x"})


def test_headers_jsonb_text_is_limited():
    event(headers=many_headers(3, MAX_HEADERS_BYTES))
    with pytest.raises(
        InvalidEvent, match=r"65537 bytes as Postgres jsonb.*1 over the limit of 65536"
    ):
        event(headers=many_headers(3, MAX_HEADERS_BYTES + 1))


def test_traceparent_is_not_in_the_headers_json():
    envelope, _ = event(headers={"traceparent": TP, "b": "2", "a": "1"})
    assert extra_headers(envelope) == {"b": "2", "a": "1"}


def largest_event(max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES):
    """An event at every default limit: names of 4-byte characters, payload and headers full."""
    return make_envelope(
        aggregate_type="a" * MAX_AGGREGATE_TYPE_LENGTH,
        aggregate_id="\U0001f600" * MAX_NAME_LENGTH,
        event_type="\U0001f600" * MAX_NAME_LENGTH,
        payload=padded(DEFAULT_MAX_PAYLOAD_BYTES, x=[1e300] * 100),
        headers={**many_headers(MAX_HEADERS, MAX_HEADERS_BYTES), "traceparent": TP},
        max_record_bytes=max_record_bytes,
    )


def test_an_event_at_every_default_limit_fits_the_record_limit():
    envelope, _ = largest_event()
    size = wire_size(envelope, render(envelope.payload), render(extra_headers(envelope)))
    # 968,111 bytes of the record's own, and the bound of the connector's source headers
    assert size == 968_111 + SOURCE_HEADERS_BYTES == 968_565 <= DEFAULT_MAX_RECORD_BYTES
    # Kafka's defaults: producer max.request.size, broker message.max.bytes.
    assert DEFAULT_MAX_RECORD_BYTES < 1_048_576 < 1_048_588
    with pytest.raises(InvalidEvent, match=r"968565 bytes .*1 over the limit of 968564"):
        largest_event(max_record_bytes=size - 1)


def test_the_record_limit_catches_a_larger_payload_limit():
    payload = padded(DEFAULT_MAX_RECORD_BYTES)
    with pytest.raises(InvalidEvent, match=r"Kafka record would be 1000\d{3} bytes \(1000000 of"):
        make_envelope(
            aggregate_type="order",
            aggregate_id="o-1",
            event_type="Big",
            payload=payload,
            max_payload_bytes=2 * DEFAULT_MAX_RECORD_BYTES,
        )


def test_wire_size_counts_key_value_and_every_header():
    envelope, _ = event(aggregate_id="é", headers={"traceparent": TP, "t": "1"})
    headers_text = render(extra_headers(envelope))
    assert headers_text == '{"t": "1"}'
    names = len("ideventTypeaggregateTypetraceparentheadersschemaVersion")
    values = 36 + len("OrderPlaced") + len("order") + len(TP) + len(headers_text) + len("1")
    expected = RECORD_OVERHEAD_BYTES + 6 * HEADER_OVERHEAD_BYTES + 2 + 5 + names + values
    expected += SOURCE_HEADERS_BYTES  # the connector's source headers, at their most
    assert wire_size(envelope, "12345", headers_text) == expected
    # Without other headers the "headers" header is still written, with a null value.
    bare, _ = event()
    key = len("o-1") - len("é".encode())
    assert wire_size(bare, "12345", None) == expected - len(TP) - len(headers_text) + key


def test_every_column_the_connector_places_in_a_header_is_counted():
    envelope, _ = event()
    assert set(_header_values(envelope, None)) == {column for column, _ in HEADER_COLUMNS}


def test_outbox_passes_its_record_limit_to_validation():
    outbox = OutboxSettings(max_record_bytes=500).build()
    assert outbox.max_record_bytes == 500
    with pytest.raises(InvalidEvent, match="over the limit of 500"):
        outbox.publish(
            Session(), aggregate_type="order", aggregate_id="o-1", event_type="X", payload="x" * 300
        )
    assert Outbox().max_record_bytes == DEFAULT_MAX_RECORD_BYTES


def test_an_aggregate_type_that_would_make_an_illegal_topic_name_is_refused():
    with pytest.raises(InvalidEvent, match="at most 249 characters with the topic prefix"):
        event(aggregate_type="a" * (MAX_AGGREGATE_TYPE_LENGTH + 1))


@pytest.mark.parametrize("name", ["order\n", "order\r\n", "ord er", "order/x", "örder"])
def test_an_aggregate_type_with_a_character_no_topic_name_allows_is_refused(name):
    """A final newline too: Kafka would refuse the topic and the connector task would fail."""
    with pytest.raises(InvalidEvent, match="becomes part of a Kafka topic name"):
        event(aggregate_type=name)


def test_a_traceparent_with_a_final_newline_is_refused_and_not_continued():
    from outboxkit.kernel.tracing.context import TraceContext

    header = "00-" + "a" * 32 + "-" + "b" * 16 + "-01"
    assert TraceContext.parse(header) is not None
    assert TraceContext.parse(header + "\n") is None
    with pytest.raises(InvalidEvent, match="not a W3C trace context"):
        event(headers={"traceparent": header + "\n"})


@pytest.mark.parametrize("text", ["a", "é", "€", "🚀", "a\u00e9\u20ac\U0001f680" * 40])
def test_the_quick_record_bound_is_never_below_the_exact_size(text):
    """publish skips the exact record size when the bound is within the limit: the bound must
    hold for characters of every UTF-8 length, in every column that travels."""
    from outboxkit.kernel.envelope import _record_bound, _record_bytes, _render_headers

    envelope, _ = make_envelope(
        aggregate_type="order",
        aggregate_id=text,
        event_type=text,
        payload={},
        headers={"traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01", "k": text},
    )
    headers_text = _render_headers(extra_headers(envelope))
    assert _record_bound(envelope, headers_text) >= _record_bytes(envelope, 0, headers_text)
