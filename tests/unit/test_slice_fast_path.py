"""`all_new` (the slice applier's fast path) says "apply every record" exactly when the
record-by-record `Decider` would: on any mix of window ids, parked keys, re-sends inside the
slice, undecodable records, unknown types and rejected payloads."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from inbox.decision import Action, Decider, PartitionView
from inbox.handlers import BatchHandler
from inbox.slice import all_new, incoming
from outboxkit.kernel.envelope import Envelope
from outboxkit.kernel.wire.record import Decoded, KafkaRecord

IDS = [str(uuid.UUID(int=n)) for n in range(6)]
KEYS = ["a", "b", "c"]
TYPES = ["Placed", "Paid", "Odd"]


@st.composite
def slices(draw: st.DrawFn) -> tuple[PartitionView, list[Decoded], BatchHandler]:
    count = draw(st.integers(1, 6))
    items = []
    for offset in range(10, 10 + count):
        key = draw(st.sampled_from(KEYS))
        event_id, event_type = draw(st.sampled_from(IDS)), draw(st.sampled_from(TYPES))
        record = KafkaRecord("t", 0, offset, key.encode(), b"{}", [])
        if draw(st.integers(0, 9)) == 0:  # undecodable: no envelope, the headers' id and type
            items.append(Decoded(record, None, "bad JSON", key, event_id, event_type))
            continue
        payload = {"ok": draw(st.integers(0, 9)) > 0}
        envelope = Envelope("order", key, event_type, payload, event_id=uuid.UUID(event_id))
        items.append(Decoded(record, envelope, None, key, event_id, event_type))
    view = PartitionView(
        watermark=9,
        recent_ids=frozenset(draw(st.lists(st.sampled_from(IDS), max_size=2))),
        parked_keys=frozenset(draw(st.lists(st.sampled_from(KEYS), max_size=1))),
    )
    types = draw(st.sampled_from([None, frozenset(TYPES[:2])]))
    validate = draw(st.sampled_from([None, lambda e: None if e.payload["ok"] else "not ok"]))
    return view, items, BatchHandler(lambda events, uow: None, types, validate)


@settings(max_examples=500)
@given(slices())
def test_all_new_agrees_with_the_decider(
    case: tuple[PartitionView, list[Decoded], BatchHandler],
) -> None:
    view, items, batch = case
    decider = Decider(view, known_types=batch.event_types)
    decided = [decider.decide(incoming(item, batch)).action for item in items]
    assert all_new(view, items, batch) == all(a is Action.APPLY for a in decided)


@given(st.uuids(), st.sampled_from(["plain", "upper", "braces", "urn", "hex", "cut", "space"]))
def test_the_window_takes_exactly_the_canonical_uuid_text(value: uuid.UUID, form: str) -> None:
    from inbox.recorder import _is_uuid

    text = {
        "plain": str(value),
        "upper": str(value).upper(),
        "braces": "{" + str(value) + "}",
        "urn": value.urn,
        "hex": value.hex,
        "cut": str(value)[:-1],
        "space": str(value) + "\n",
    }[form]
    try:
        canonical = str(uuid.UUID(text)) == text
    except ValueError:
        canonical = False
    assert _is_uuid(text) == canonical


_IDS = st.one_of(
    st.none(),
    st.just(""),
    st.uuids().map(str),
    st.uuids().map(lambda u: str(u).upper()),
    st.lists(st.uuids().map(str), min_size=2, max_size=3).map(",".join),  # a comma inside
    st.text(alphabet="0123456789abcdef-,\n", max_size=40),
)


@given(st.lists(_IDS, max_size=12))
def test_the_window_is_asked_for_exactly_the_distinct_canonical_ids(ids: list[str | None]) -> None:
    from inbox.recorder import _is_uuid, canonical_uuids

    one_by_one = ",".join(sorted({i for i in ids if i and _is_uuid(i)}))
    assert canonical_uuids(ids) == one_by_one
