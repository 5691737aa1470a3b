"""The settings reference, generated from the settings classes: each field's name, type,
default, environment variable and description, read from the pydantic model."""

from __future__ import annotations

import importlib
import inspect
import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from markdown_text import cell, code, table
from pydantic import BaseModel, SecretBytes, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from pydantic_settings import BaseSettings

MASKED = "`**********` (secret)"
# A field named like this holds a secret itself (not a file or folder of secrets).
_SECRET_NAME = re.compile(r"(password|secret|token|api_key|private_key)(?!.*_(file|dir|location)$)")


@dataclass(frozen=True)
class Documented:
    """A settings class of the reference; ``prefix`` replaces its own env prefix where the class
    is only used with another's (mixed in, or subclassed per service)."""

    path: str
    prefix: str | None = None
    note: str = ""

    def load(self) -> type[BaseModel]:
        """The class, imported."""
        module, _, name = self.path.rpartition(".")
        cls = getattr(importlib.import_module(module), name)
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)):
            raise TypeError(f"{self.path} is not a pydantic model")
        return cls

    @property
    def name(self) -> str:
        """The class's name, the section's heading."""
        return self.path.rpartition(".")[2]


# Every settings class of the packages, in the order a reader meets them. A test fails when a
# BaseSettings subclass of the packages is missing here.
SETTINGS: tuple[Documented, ...] = (
    Documented("service_template.settings.ServiceSettings"),
    Documented(
        "spark_consumers.settings.ConsumerSettings",
        prefix="<PREFIX>",
        note="Mixed into a service's settings class, whose env prefix applies "
        "(e.g. `ORDERS_TOPIC_PREFIX`).",
    ),
    Documented(
        "outbox.settings.OutboxSettings",
        prefix="<PREFIX>OUTBOX__",
        note="A model composed into a service's settings as its `outbox` field: set with the "
        "service's prefix and the nested delimiter (e.g. `ORDERS_OUTBOX__MODE=retain`).",
    ),
    Documented(
        "outbox.settings.ReleaseSettings",
        prefix="<PREFIX>OUTBOX__RELEASE__",
        note="The `release` field of `OutboxSettings`: the releaser of scheduled messages each "
        "service replica runs (e.g. `ORDERS_OUTBOX__RELEASE__POLL_SECONDS=0.1`). The consumer "
        "driver runs one per database with the defaults (`outboxkit consume --no-release`: "
        "none).",
    ),
    Documented("outboxkit.kernel.kafka.security.KafkaSecuritySettings"),
    Documented("cdc.endpoints.EndpointSettings"),
    Documented("cdc.settings.CdcSettings"),
    Documented("outboxkit.settings.Settings"),
    Documented("outboxkit_workshop.devstack.settings.StackSettings"),
    Documented(
        "outboxkit_workshop.saga.common.SagaServiceSettings",
        prefix="<SERVICE>_",
        note="Each saga service reads it with its own prefix: `ORDERS_`, `PAYMENTS_`, `SHIPPING_`.",
    ),
)


def type_name(annotation: Any) -> str:
    """A field's type as written in code: ``str | None``, ``list[Path]``, ``Literal['a', 'b']``."""
    if annotation is type(None):
        return "None"
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return annotation.__name__
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in args)
    if origin is typing.Literal:
        return f"Literal[{', '.join(repr(a) for a in args)}]"
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(type_name(a) for a in args)}]"
    return str(annotation).replace("typing.", "")


def is_secret(name: str, field: FieldInfo) -> bool:
    """A field whose value is a secret: a pydantic secret type, or a name that says so."""
    secret_types = (SecretStr, SecretBytes)
    annotation = field.annotation
    candidates = (annotation, *typing.get_args(annotation))
    if any(isinstance(c, type) and issubclass(c, secret_types) for c in candidates):
        return True
    return bool(_SECRET_NAME.search(name))


def default_text(name: str, field: FieldInfo) -> str:
    """The default as a reader sets it; a secret's is masked, a factory's is named."""
    if field.is_required():
        return "required"
    if is_secret(name, field):
        return MASKED
    factory = field.default_factory
    if factory is not None:
        if factory in (list, tuple, dict, set):
            return code(repr(factory()))
        if isinstance(factory, type) and issubclass(factory, BaseModel):
            return f"[{factory.__name__}](#{factory.__name__.lower()}) defaults"
        return code(f"{factory.__name__}()")
    value = field.default
    if value is PydanticUndefined:
        return "required"
    if isinstance(value, Path):
        value = str(value)
    return code(repr(value))


def env_prefix(model: type[BaseModel], documented: Documented) -> str:
    """The prefix of the class's environment variables."""
    if documented.prefix is not None:
        return documented.prefix
    if issubclass(model, BaseSettings):
        return str(model.model_config.get("env_prefix", ""))
    raise ValueError(f"{documented.path}: a model that is not BaseSettings needs a prefix")


def env_name(prefix: str, name: str, field: FieldInfo, delimiter: str | None) -> str:
    """The environment variable of a field; a nested model's fields take the delimiter."""
    alias = field.validation_alias if isinstance(field.validation_alias, str) else field.alias
    variable = alias.upper() if alias else f"{prefix}{name}".upper()
    annotation = field.annotation
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        nested = f"{variable}{delimiter}<FIELD>" if delimiter else f"{variable} (JSON)"
        return code(nested)
    return code(variable)


def type_cell(annotation: Any) -> str:
    """The type, linked to its own section when it is a documented model."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"[{annotation.__name__}](#{annotation.__name__.lower()})"
    return code(type_name(annotation))


def section(documented: Documented, model: type[BaseModel] | None = None) -> list[str]:
    """The class's heading, where it is, its environment and its fields (``model``: the class,
    when it is not imported from ``documented.path``)."""
    model = model or documented.load()
    prefix = env_prefix(model, documented)
    delimiter = (
        model.model_config.get("env_nested_delimiter") if issubclass(model, BaseSettings) else None
    )
    lines = [f"## {documented.name}", "", f"`{documented.path}`", ""]
    doc = inspect.getdoc(model)
    if doc:
        lines += [doc, ""]
    lines += [f"Environment prefix: `{prefix}`" + (" (none)" if not prefix else ""), ""]
    if documented.note:
        lines += [documented.note, ""]
    rows = []
    for name, field in model.model_fields.items():
        if not field.description:
            raise ValueError(f"{documented.path}.{name} has no description: add one")
        rows.append(
            (
                f"{code(name)}<br>{env_name(prefix, name, field, delimiter)}",
                type_cell(field.annotation),
                default_text(name, field),
                cell(field.description),
            )
        )
    header = ("Setting, environment variable", "Type", "Default", "Description")
    return [*lines, *table(header, rows), ""]


def page(settings: tuple[Documented, ...] = SETTINGS) -> str:
    """The whole settings reference page."""
    lines = [
        "# Settings reference",
        "",
        "Generated from the settings classes when the site is built. Each setting is read from "
        "its environment variable (or a `.env` file where the class names one); a nested model "
        "is set field by field with the class's nested delimiter, or as JSON.",
        "",
    ]
    for documented in settings:
        lines += section(documented)
    return "\n".join(lines)
