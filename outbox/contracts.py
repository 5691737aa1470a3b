"""Typed event contracts: one pydantic model per event type and version, shared by the service
that publishes the event and the ones that consume it.

    class OrderPlaced(Event):
        event_type = "OrderPlaced"
        aggregate_type = "order"
        version = 2
        key = "order_id"          # the payload field that is the aggregate id

        order_id: str
        amount: int

    uow.publish_event(OrderPlaced(order_id="o-1", amount=3))      # validated; header v2

    contracts = Contracts([OrderPlaced])
    @contracts.upcaster(OrderPlaced, from_version=1)
    def _(payload): return {**payload, "amount": payload["total"]}

    handler = inbox.typed_batch(contracts, apply)   # apply(received, uow); each has .event

The version travels in the ``eventVersion`` header (absent: version 1); the envelope's own
``schemaVersion`` versions the envelope format, not the payload. A consumer decodes a payload of
an older version through the upcasters registered per (type, from-version), one step at a time,
then validates it against the current model. A payload that does not validate, a version newer
than the consumer knows, a missing upcaster, a payload's key that is not the event's aggregate
id: each is a reason, and the inbox parks the event with it before the handler runs. Redrive of
a parked event goes through the same decoding, so an upcaster deployed later applies it.

Payloads are validated as JSON decoding gives them (Python mode): declare ``strict=True`` in the
model's config for no coercion (``"5"`` is then not an integer), and JSON-native field types.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from outbox.publish import NewEvent
from outboxkit.kernel.envelope import Envelope

VERSION_HEADER = "eventVersion"

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]
E = TypeVar("E", bound="Event")


class ContractError(ValueError):
    """An event that cannot be decoded into its contract; the message is the parking reason."""


class Event(BaseModel):
    """An event type's payload at one version. Subclasses set the class attributes."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    event_type: ClassVar[str]
    aggregate_type: ClassVar[str]
    version: ClassVar[int] = 1
    # The payload field that holds the aggregate id (the Kafka key): published as the event's
    # aggregate id, and checked against it on the consumer's side. None: given when publishing.
    key: ClassVar[str | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        version = cls.__dict__.get("version", getattr(cls, "version", 1))
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise TypeError(f"{cls.__name__}.version must be an integer >= 1, not {version!r}")

    @classmethod
    def declared(cls) -> bool:
        """True when the class names its event and aggregate type (a concrete contract)."""
        return "event_type" in _class_vars(cls) and "aggregate_type" in _class_vars(cls)

    def aggregate_id(self) -> str:
        """The aggregate id this event is about: its ``key`` field's value."""
        if self.key is None:
            raise ContractError(
                f"{type(self).__name__} has no key field: give the aggregate id when publishing"
            )
        return str(getattr(self, self.key))

    def new_event(
        self,
        *,
        aggregate_id: str | None = None,
        headers: Mapping[str, str] | None = None,
        caused_by: Envelope | None = None,
    ) -> NewEvent:
        """This event ready for `UnitOfWork.publish_many`: validated again (a model built with
        ``model_construct`` or changed since), its payload as JSON values, its version in a
        header.

        Args:
            aggregate_id: The aggregate id (the Kafka key); None takes the ``key`` field's value.
            headers: Extra headers to carry; the version header is added to them.
            caused_by: The consumed event this one follows from: its trace is continued.
        """
        model = type(self)
        if not model.declared():
            raise ContractError(f"{model.__name__} does not set event_type and aggregate_type")
        try:
            checked = model.model_validate_json(self.model_dump_json(warnings=False))
        except ValidationError as exc:
            raise ContractError(f"{model.event_type} v{model.version}: {describe(exc)}") from exc
        return NewEvent(
            aggregate_type=model.aggregate_type,
            aggregate_id=self.aggregate_id() if aggregate_id is None else aggregate_id,
            event_type=model.event_type,
            payload=checked.model_dump(mode="json"),
            headers={**(headers or {}), VERSION_HEADER: str(model.version)},
            caused_by=caused_by,
        )


def _class_vars(cls: type) -> set[str]:
    return {name for klass in cls.__mro__ if klass is not Event for name in vars(klass)}


def version_of(envelope: Envelope) -> int | None:
    """The payload version the event carries (1 when it carries none); None when malformed."""
    text = envelope.headers.get(VERSION_HEADER)
    if text is None:
        return 1
    return int(text) if text.isdigit() and text[0] != "0" else None


@dataclass(frozen=True)
class Received(Generic[E]):
    """A consumed event: its envelope (identity, headers, trace) and its decoded contract.

    Attributes:
        envelope: The event as it came from Kafka: id, types, key, headers, trace context.
        event: Its payload decoded into the type's current model (upcast if older).
    """

    envelope: Envelope
    event: E


class Contracts:
    """The event types a service knows, at their current versions, and the upcasters from
    their older versions.

    Args:
        models: The event models to register, each as its type's current version.
    """

    def __init__(self, models: Iterable[type[Event]] = ()) -> None:
        self._models: dict[str, type[Event]] = {}
        self._upcasters: dict[tuple[str, int], Upcaster] = {}
        for model in models:
            self.register(model)

    def register(self, model: type[Event]) -> type[Event]:
        """Add ``model`` as its type's current version (usable as a class decorator).

        Args:
            model: A declared `Event` subclass; one model per event type.
        """
        if not model.declared():
            raise TypeError(f"{model.__name__} does not set event_type and aggregate_type")
        known = self._models.get(model.event_type)
        if known is not None and known is not model:
            raise ValueError(
                f"event type {model.event_type} has two models: {known.__name__} (v"
                f"{known.version}) and {model.__name__} (v{model.version})"
            )
        self._models[model.event_type] = model
        return model

    @property
    def models(self) -> Mapping[str, type[Event]]:
        """Each known event type's current model."""
        return dict(self._models)

    @property
    def event_types(self) -> frozenset[str]:
        return frozenset(self._models)

    def upcaster(
        self, model: type[Event] | str, *, from_version: int
    ) -> Callable[[Upcaster], Upcaster]:
        """Register the function that turns a payload of ``from_version`` into one of
        ``from_version + 1`` (a decorator).

        Args:
            model: The event's model, or its event type's name.
            from_version: The payload version the function reads; it returns the next one's.
        """
        event_type = model if isinstance(model, str) else model.event_type

        def register(function: Upcaster) -> Upcaster:
            step = (event_type, from_version)
            if step in self._upcasters:
                raise ValueError(f"{event_type} v{from_version} has an upcaster already")
            self._upcasters[step] = function
            return function

        return register

    def upcasters(self) -> Mapping[tuple[str, int], Upcaster]:
        return dict(self._upcasters)

    def decode(self, envelope: Envelope) -> Event:
        """``envelope``'s payload as its type's current model, upcast from the version it was
        published at; ContractError with the reason when it cannot be.

        Args:
            envelope: The consumed event, its version in the ``eventVersion`` header.
        """
        model = self._models.get(envelope.event_type)
        if model is None:
            raise ContractError(f"no contract for event type {envelope.event_type!r}")
        if envelope.aggregate_type != model.aggregate_type:
            raise ContractError(
                f"{model.event_type} is a {model.aggregate_type} event, not "
                f"{_shown(envelope.aggregate_type)}"
            )
        version = version_of(envelope)
        if version is None:
            raise ContractError(
                f"header {VERSION_HEADER} {_shown(envelope.headers.get(VERSION_HEADER))} is not "
                "a version number"
            )
        payload = self._upcast(model, version, envelope.payload)
        try:
            event = model.model_validate(payload)
        except ValidationError as exc:
            shown = f" (upcast from v{version})" if version != model.version else ""
            raise ContractError(describe(exc) + shown) from exc
        if model.key is not None and str(getattr(event, model.key)) != envelope.aggregate_id:
            raise ContractError(
                f"{model.key} {getattr(event, model.key)!r} is not the event's key "
                f"{_shown(envelope.aggregate_id)}"
            )
        return event

    def _upcast(self, model: type[Event], version: int, payload: Any) -> Any:
        if version > model.version:
            raise ContractError(
                f"{model.event_type} v{version} is newer than this consumer's v{model.version}: "
                "deploy the consumer with the new contract, then redrive"
            )
        for step in range(version, model.version):
            upcaster = self._upcasters.get((model.event_type, step))
            if upcaster is None:
                raise ContractError(
                    f"no upcaster for {model.event_type} v{step} -> v{step + 1}: register one, "
                    "then redrive"
                )
            if not isinstance(payload, dict):
                raise ContractError(f"{model.event_type} v{step}: the payload is not an object")
            try:
                payload = upcaster(dict(payload))
            except Exception as exc:  # a bad old payload: parked with why, not a crash
                raise ContractError(
                    f"upcasting {model.event_type} v{step} -> v{step + 1} failed: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
        return payload

    def problem(self, envelope: Envelope) -> str | None:
        """Why ``envelope`` must not be applied (the inbox parks it with this), else None; a type
        without a contract is no concern here (the inbox parks unknown types itself).

        Args:
            envelope: The consumed event to check against its contract.
        """
        if envelope.event_type not in self._models:
            return None
        try:
            self.decode(envelope)
        except ContractError as exc:
            return str(exc)
        return None


def describe(error: ValidationError, *, most: int = 3) -> str:
    """The first few problems of a validation error, each with where and what it got."""
    problems = error.errors(include_url=False)
    parts = []
    for e in problems[:most]:
        where = ".".join(str(p) for p in e["loc"]) or "payload"
        got = "" if e["type"] == "missing" else f" (got {_shown(e['input'])})"
        parts.append(f"{where}: {e['msg']}{got}")
    more = len(problems) - most
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def _shown(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
