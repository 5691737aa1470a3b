import json
import uuid
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from outboxkit.kernel.envelope import Envelope
from outboxkit.kernel.wire.record import (
    HEADER_COLUMNS,
    KafkaRecord,
    UndecodableRecord,
    decode,
    encode,
    read,
    topic_for,
)

EVENT_ID = str(uuid.uuid4())


def headers(**extra):
    base = {
        "id": EVENT_ID,
        "eventType": "OrderPlaced",
        "aggregateType": "order",
        "schemaVersion": "1",
    }
    base.update(extra)
    return [(k, None if v is None else v.encode()) for k, v in base.items()]


def record(key, value, hdrs, timestamp_ms=None):
    return KafkaRecord("outbox.event.order", 0, 7, key, value, hdrs, timestamp_ms)


def test_decode_round_trips_the_connector_record():
    tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    env = decode(
        record(
            b"o-1",
            json.dumps({"a": None}).encode(),
            headers(traceparent=tp, headers='{"tenant": "t1"}'),
            1_700_000_000_000,
        )
    )
    assert (env.aggregate_type, env.aggregate_id, env.event_type) == ("order", "o-1", "OrderPlaced")
    assert env.payload == {"a": None}
    assert str(env.event_id) == EVENT_ID
    assert env.headers == {"tenant": "t1", "traceparent": tp}
    assert env.created_at.timestamp() == 1_700_000_000  # the Kafka timestamp, not "now"


def test_encode_then_decode_gives_the_envelope_back():
    sent = Envelope(
        aggregate_type="order",
        aggregate_id="o-2",
        event_type="OrderPlaced",
        payload={"items": [1, "two", None], "note": "ünï"},
        headers={"tenant": "t1", "traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01"},
    )
    rec = encode(sent, topic_prefix="events.", partition=3, offset=41)
    assert (rec.topic, rec.partition, rec.offset) == ("events.order", 3, 41)
    assert rec.key == b"o-2"
    back = decode(rec)
    assert replace(back, created_at=sent.created_at) == sent
    # The Kafka timestamp has millisecond precision.
    assert abs((back.created_at - sent.created_at).total_seconds()) < 0.001


def test_the_connector_places_every_header_the_decoder_reads():
    placed = {header for _column, header in HEADER_COLUMNS} | {"id"}
    rec = encode(
        Envelope(
            "order",
            "o",
            "T",
            {},
            {"x": "1", "traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"},
        )
    )
    assert {name for name, _ in rec.headers} <= placed
    assert topic_for("order", topic_prefix="p.") == "p.order"


@pytest.mark.parametrize("raw", [None, "null"])
def test_absent_extra_headers_decode_to_nothing(raw):
    assert decode(record(b"k", b"{}", headers(headers=raw, traceparent=None))).headers == {}


@pytest.mark.parametrize(
    ("key", "value", "hdrs", "message"),
    [
        (b"k", b"{}", [("eventType", b"x")], "header 'id' is missing"),
        (None, b"{}", headers(), "no key"),
        (b"k", None, headers(), "no value"),
        (b"k", b"{not json", headers(), "not JSON"),
        (b"k", b"{}", headers(id="nope"), "not a UUID"),
        (b"k", b"{}", headers(headers="[1]"), "not a JSON object"),
        (b"k", b"{}", headers(schemaVersion="v2"), "not an integer"),
    ],
)
def test_undecodable_records_say_why(key, value, hdrs, message):
    with pytest.raises(UndecodableRecord, match=message):
        decode(record(key, value, hdrs))
    result = read(record(key, value, hdrs))  # the inbox's way: never raises
    assert result.envelope is None and message.split("'")[0] in (result.problem or "")
    assert result.key == (None if key is None else key.decode())


# -- parse_json: json.loads's result and errors, whatever the bytes -----------------------------
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


def _loaded(load, raw: bytes) -> tuple[str, str]:
    try:
        return "value", repr(load(raw))
    except Exception as exc:  # the same class and message, or the same value
        return type(exc).__name__, str(exc)


@given(
    st.one_of(
        st.tuples(_JSON, st.booleans(), st.sampled_from(["", " ", "\n", "x", "}", "\x00"])).map(
            lambda v: (json.dumps(v[0], ensure_ascii=v[1]) + v[2]).encode("utf-8", "surrogatepass")
        ),
        st.binary(max_size=24).map(lambda b: b"{" + b),
        st.binary(max_size=24).map(lambda b: b"[" + b),
        st.binary(max_size=24),
        _JSON.map(lambda v: json.dumps(v).encode("utf-16-le")),
    )
)
def test_parse_json_gives_what_json_loads_gives(raw: bytes) -> None:
    from outboxkit.kernel.wire.record import parse_json

    assert _loaded(parse_json, raw) == _loaded(json.loads, raw)
