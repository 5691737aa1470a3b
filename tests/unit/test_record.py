import json
import uuid

import pytest

from outbox.record import UndecodableRecord, decode

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


def test_decode_round_trips_the_connector_record():
    tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    env = decode(
        b"o-1",
        json.dumps({"a": None}).encode(),
        headers(traceparent=tp, headers='{"tenant": "t1"}'),
        1_700_000_000_000,
    )
    assert (env.aggregate_type, env.aggregate_id, env.event_type) == ("order", "o-1", "OrderPlaced")
    assert env.payload == {"a": None}
    assert str(env.event_id) == EVENT_ID
    assert env.headers == {"tenant": "t1", "traceparent": tp}
    assert env.created_at.year == 2023


@pytest.mark.parametrize("raw", [None, "null"])
def test_absent_extra_headers_decode_to_nothing(raw):
    assert decode(b"k", b"{}", headers(headers=raw, traceparent=None)).headers == {}


@pytest.mark.parametrize(
    ("key", "value", "hdrs", "message"),
    [
        (b"k", b"{}", [("eventType", b"x")], "header 'id' is missing"),
        (None, b"{}", headers(), "no key"),
        (b"k", None, headers(), "no value"),
        (b"k", b"{not json", headers(), "not JSON"),
        (b"k", b"{}", headers(id="nope"), "not a UUID"),
        (b"k", b"{}", headers(headers="[1]"), "not a JSON object"),
    ],
)
def test_undecodable_records_say_why(key, value, hdrs, message):
    with pytest.raises(UndecodableRecord, match=message):
        decode(key, value, hdrs)
