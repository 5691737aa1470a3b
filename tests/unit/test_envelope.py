import json

import pytest

from outbox.envelope import DEFAULT_MAX_PAYLOAD_BYTES, encode_payload, make_envelope
from outbox.errors import InvalidEvent

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
    with pytest.raises(InvalidEvent, match="limit is"):
        encode_payload(just_fits + "é")


def test_a_literal_backslash_u0000_text_is_not_mistaken_for_nul():
    assert json.loads(encode_payload("\\u0000")) == "\\u0000"
