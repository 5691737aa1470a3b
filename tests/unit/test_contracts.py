"""Typed event contracts without a database: publishing a model, decoding and upcasting on the
consumer's side, the reasons an event is parked with, and the schema compatibility check."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ConfigDict

from inbox.typed import typed_batch, typed_handler
from outbox import ContractError, Contracts, Envelope, Event
from outbox.contracts import VERSION_HEADER, Received
from outbox.schemas import check, export
from outboxkit.kernel.wire.jsonb import render


class Placed(Event):
    event_type = "Placed"
    aggregate_type = "order"
    key = "order_id"
    model_config = ConfigDict(strict=True, frozen=True)
    order_id: str
    amount: int


class PlacedV2(Event):
    """Placed at version 2: ``amount`` became ``total`` with a currency."""

    event_type = "Placed"
    aggregate_type = "order"
    version = 2
    key = "order_id"
    model_config = ConfigDict(strict=True, frozen=True)
    order_id: str
    total: int
    currency: Literal["EUR", "USD"] = "EUR"


def delivered(event: Event) -> Envelope:
    """What a consumer receives for ``event`` published now (payload through JSON)."""
    new = event.new_event()
    payload = json.loads(json.dumps(new.payload))
    return Envelope(new.aggregate_type, new.aggregate_id, new.event_type, payload, new.headers)


def test_a_published_model_carries_its_type_aggregate_key_and_version() -> None:
    new = PlacedV2(order_id="o-1", total=5).new_event()
    assert (new.aggregate_type, new.aggregate_id, new.event_type) == ("order", "o-1", "Placed")
    assert new.headers == {VERSION_HEADER: "2"}
    assert new.payload == {"order_id": "o-1", "total": 5, "currency": "EUR"}


def test_publishing_validates_the_model_again() -> None:
    forged = Placed.model_construct(order_id="o-1", amount="many")
    with pytest.raises(ContractError, match=r"Placed v1: amount: Input should be a valid integer"):
        forged.new_event()


def test_an_event_of_the_current_version_decodes_to_its_model() -> None:
    contracts = Contracts([PlacedV2])
    event = contracts.decode(delivered(PlacedV2(order_id="o-1", total=5, currency="USD")))
    assert event == PlacedV2(order_id="o-1", total=5, currency="USD")


def test_an_old_version_is_upcast_and_one_without_an_upcaster_is_refused() -> None:
    old = delivered(Placed(order_id="o-1", amount=7))
    assert Contracts([PlacedV2]).problem(old) == (
        "no upcaster for Placed v1 -> v2: register one, then redrive"
    )
    contracts = Contracts([PlacedV2])

    @contracts.upcaster(PlacedV2, from_version=1)
    def _(payload: dict[str, object]) -> dict[str, object]:
        return {"order_id": payload["order_id"], "total": payload.pop("amount")}

    assert contracts.decode(old) == PlacedV2(order_id="o-1", total=7)
    # Events that carry no version header were published before there were contracts: v1.
    bare = Envelope("order", "o-1", "Placed", {"order_id": "o-1", "amount": 7})
    assert contracts.decode(bare) == PlacedV2(order_id="o-1", total=7)


def test_each_reason_an_event_is_refused_with() -> None:
    contracts = Contracts([PlacedV2])

    @contracts.upcaster(PlacedV2, from_version=1)
    def _(payload: dict[str, object]) -> dict[str, object]:
        return {"order_id": payload["order_id"], "total": payload["amount"]}

    def problem(payload: object, headers: dict[str, str], key: str = "o-1") -> str | None:
        return contracts.problem(Envelope("order", key, "Placed", payload, headers))

    v2 = {VERSION_HEADER: "2"}
    assert problem({"order_id": "o-1", "total": 1}, v2) is None
    assert problem({"order_id": "o-1", "total": "1"}, v2) == (
        "total: Input should be a valid integer (got '1')"
    )
    assert problem({"order_id": "o-1", "total": 1, "currency": "GBP"}, v2) == (
        "currency: Input should be 'EUR' or 'USD' (got 'GBP')"
    )
    assert problem({"order_id": "o-2", "total": 1}, v2) == (
        "order_id 'o-2' is not the event's key 'o-1'"
    )
    assert problem({"order_id": "o-1", "total": 1}, {VERSION_HEADER: "3"}) == (
        "Placed v3 is newer than this consumer's v2: deploy the consumer with the new contract, "
        "then redrive"
    )
    assert problem({"order_id": "o-1"}, {VERSION_HEADER: "two"}) == (
        "header eventVersion 'two' is not a version number"
    )
    assert problem({"order_id": "o-1"}, {VERSION_HEADER: "1"}) == (
        "upcasting Placed v1 -> v2 failed: KeyError: 'amount'"
    )
    assert problem({"order_id": "o-1", "amount": "x"}, {VERSION_HEADER: "1"}) == (
        "total: Input should be a valid integer (got 'x') (upcast from v1)"
    )
    assert problem([1], {VERSION_HEADER: "1"}) == "Placed v1: the payload is not an object"
    wrong = Envelope("payment", "o-1", "Placed", {"order_id": "o-1", "total": 1}, v2)
    assert contracts.problem(wrong) == "Placed is a order event, not 'payment'"
    # A type without a contract is left to the inbox, which parks unknown types itself.
    assert contracts.problem(Envelope("order", "o-1", "Other", {}, {})) is None


def test_a_contract_needs_its_names_and_one_model_per_type() -> None:
    class Nameless(Event):
        x: int

    with pytest.raises(TypeError, match="does not set event_type and aggregate_type"):
        Contracts([Nameless])
    with pytest.raises(ValueError, match="event type Placed has two models"):
        Contracts([Placed, PlacedV2])
    with pytest.raises(TypeError, match="version must be an integer >= 1"):

        class Zero(Event):
            version = 0


def test_typed_handlers_get_the_model_and_never_see_an_invalid_event() -> None:
    contracts = Contracts([PlacedV2])
    seen: list[Received[PlacedV2]] = []
    batch = typed_batch(contracts, lambda received, uow: seen.extend(received))
    good = delivered(PlacedV2(order_id="o-1", total=5))
    bad = Envelope("order", "o-1", "Placed", {"order_id": "o-1"}, {VERSION_HEADER: "2"})
    assert batch.handles("Placed") and not batch.handles("Other")
    assert batch.invalid(good) is None
    assert batch.invalid(bad) == "total: Field required"
    batch.apply([good], None)  # type: ignore[arg-type]
    assert [r.event.total for r in seen] == [5] and seen[0].envelope is good
    one = typed_handler(contracts, lambda received, uow: seen.append(received))
    assert one.invalid(bad) == "total: Field required"


# -- what jsonb and Kafka do to a payload leaves a valid model unchanged --------------------


class Nested(Event):
    event_type = "Nested"
    aggregate_type = "thing"
    key = "id"
    id: str
    ratio: float
    count: int
    text: str
    tags: list[str]
    attributes: dict[str, int]
    maybe: float | None = None


# jsonb refuses NUL and lone surrogates in strings; the publisher refuses them too.
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))


@settings(max_examples=300, deadline=None)
@given(
    id=TEXT.filter(lambda s: s.strip() != "" and len(s) < 200),
    ratio=st.floats(allow_nan=False, allow_infinity=False),
    count=st.integers(min_value=-(10**30), max_value=10**30),
    text=TEXT,
    tags=st.lists(TEXT, max_size=5),
    attributes=st.dictionaries(TEXT, st.integers(), max_size=5),
    maybe=st.none() | st.floats(allow_nan=False, allow_infinity=False),
)
def test_any_valid_model_survives_jsonb_and_decoding_unchanged(**fields: object) -> None:
    event = Nested(**fields)  # type: ignore[arg-type]
    new = event.new_event()
    # What Debezium sends is the payload as jsonb renders it; the consumer parses that text.
    payload = json.loads(render(new.payload))
    received = Envelope(new.aggregate_type, new.aggregate_id, new.event_type, payload, new.headers)
    assert Contracts([Nested]).decode(received) == event


# -- schemas: export, and the compatibility check -----------------------------------------


def test_the_schemas_check_passes_on_what_was_exported_and_on_a_compatible_change(
    tmp_path: Path,
) -> None:
    written = export(Contracts([Placed]), tmp_path)
    assert written == [tmp_path / "Placed" / "v1.json"]
    assert json.loads(written[0].read_text())["x-version"] == 1
    assert check(Contracts([Placed]), tmp_path).ok
    assert export(Contracts([Placed]), tmp_path) == []  # unchanged: nothing rewritten

    class PlacedNote(Event):  # an optional field added: old and new consumers read both
        event_type = "Placed"
        aggregate_type = "order"
        key = "order_id"
        order_id: str
        amount: int
        note: str | None = None

    report = check(Contracts([PlacedNote]), tmp_path)
    assert report.ok and report.notes == ["Placed v1: compatible change; export it again"]


def incompatible(tmp_path: Path, model: type[Event]) -> list[str]:
    return check(Contracts([model]), tmp_path).problems


def test_the_schemas_check_names_each_breaking_change(tmp_path: Path) -> None:
    class Base(Event):
        event_type = "Paid"
        aggregate_type = "payment"
        key = "order_id"
        order_id: str
        amount: int
        method: Literal["card", "cash", "cheque"]

    export(Contracts([Base]), tmp_path)

    class Removed(Event):  # a field deployed consumers require is no longer written
        event_type, aggregate_type, key = "Paid", "payment", "order_id"
        order_id: str
        method: Literal["card", "cash", "cheque"]

    class Retyped(Event):
        event_type, aggregate_type, key = "Paid", "payment", "order_id"
        order_id: str
        amount: str
        method: Literal["card", "cash", "cheque"]

    class Narrowed(Event):
        event_type, aggregate_type, key = "Paid", "payment", "order_id"
        order_id: str
        amount: int
        method: Literal["card", "cash"]

    class Required(Event):  # old events lack the new required field
        event_type, aggregate_type, key = "Paid", "payment", "order_id"
        order_id: str
        amount: int
        method: Literal["card", "cash", "cheque"]
        currency: str

    class Widened(Event):  # an int may now be any number: old consumers cannot read 1.5
        event_type, aggregate_type, key = "Paid", "payment", "order_id"
        order_id: str
        amount: float
        method: Literal["card", "cash", "cheque"]

    expected = {
        Removed: "forward: amount: required, but absent in what is written",
        Retyped: "backward: amount: type integer is not accepted (only string)",
        Narrowed: "backward: method: values ['\"cheque\"'] are not accepted",
        Required: "backward: currency: required, but absent in what is written",
        Widened: "forward: amount: type number is not accepted (only integer)",
    }
    for model, reason in expected.items():
        problems = incompatible(tmp_path, model)
        assert len(problems) == 1 and reason in problems[0], (model.__name__, problems)
        assert "raise its version to v2 and register an upcaster from v1" in problems[0]


def test_a_raised_version_needs_its_export_and_an_upcaster_per_step(tmp_path: Path) -> None:
    export(Contracts([Placed]), tmp_path)
    contracts = Contracts([PlacedV2])
    assert check(contracts, tmp_path).problems == [
        f"Placed v2 is not in {tmp_path}: run `outboxkit schemas export` and commit it",
        "Placed: no upcaster from v1 to v2, so events of v1 cannot be applied by this consumer",
    ]
    contracts.upcaster(PlacedV2, from_version=1)(lambda p: p)
    export(contracts, tmp_path)
    assert check(contracts, tmp_path).ok
    assert sorted(p.name for p in (tmp_path / "Placed").iterdir()) == ["v1.json", "v2.json"]
    # Back to v1 in the code while v2 was exported (and may have been published): refused.
    assert "a version cannot go back" in check(Contracts([Placed]), tmp_path).problems[0]


def test_the_saga_contracts_match_their_committed_schemas(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`outboxkit schemas check` on the saga's contracts, as CI runs it; and on an empty folder
    it names every contract that is not exported yet."""
    from outboxkit.cli import main

    assert (
        main(["schemas", "check", "--contracts", "outboxkit_workshop.saga.contracts:CONTRACTS"])
        == 0
    )
    assert "10 contracts checked" in capsys.readouterr().out


def test_a_contract_never_exported_is_named(tmp_path: Path) -> None:
    assert check(Contracts([Placed]), tmp_path).problems == [
        f"Placed v1 is not in {tmp_path}: run `outboxkit schemas export` and commit it"
    ]
