"""The settings of the operator commands (environment prefix ``OUTBOXKIT_``): the pipeline's
endpoints and the outbox connector, as a deployment gives them, plus what the commands add. The
local dev stack's settings (`outboxkit_workshop.devstack.settings.StackSettings`) are the stack
commands'
own; these do not inherit them.

Also how any settings class's environment variables are spelt (`variable`, `variables`), for
the commands' messages: a bad setting named as the user wrote it, a misspelt one noticed."""

from __future__ import annotations

import difflib
import json
import shlex
import types
import typing
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from pydantic_settings import BaseSettings

from cdc.settings import CdcSettings


class Settings(CdcSettings):
    """What `outboxkit db|outbox|cdc|inbox|consume|audit` read."""

    spark_jars: list[Path] = Field(
        default_factory=list,
        description="jars `outboxkit consume` hands Spark (its Kafka connector and dependencies); "
        "empty: those of the local stack's cache, if `outboxkit dev stack install` put them there, "
        "else none (a cluster's classpath or spark-submit provides them)",
        examples=[["/opt/spark/jars/spark-sql-kafka.jar", "/opt/spark/jars/kafka-clients.jar"]],
    )
    cache_dir: Path | None = Field(
        default=None,
        description="the local stack's download cache, for the jars' fallback "
        "(default ~/.cache/outboxkit)",
    )
    consumer_metrics_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description="`outboxkit consume` serves Prometheus metrics on this port (0: a free "
        "port, logged); unset: no metrics endpoint. --metrics-port overrides it",
        examples=[9464],
    )
    consumer_metrics_host: str = Field(
        default="127.0.0.1",
        description="the address the consumer driver's metrics listen on (0.0.0.0 in a "
        "container). --metrics-host overrides it",
    )

    console_host: str = Field(
        default="127.0.0.1",
        description="the address `outboxkit console` listens on (loopback unless set; 0.0.0.0 "
        "in a container behind an HTTPS proxy). --host overrides it",
    )
    console_port: int = Field(
        default=8089, ge=0, le=65535, description="the console's port (0: a free port, logged)"
    )
    console_users_file: Path | None = Field(
        default=None,
        description="the console's users: one `NAME ROLE HASH` a line, ROLE viewer (reads) or "
        "operator (also acts), written by `outboxkit console-user`; the console refuses to "
        "start without it",
        examples=["/etc/outboxkit/console-users"],
    )
    console_secret_file: Path | None = Field(
        default=None,
        description="file holding the key that signs the console's session cookies (a mounted "
        "secret, 32 random bytes or more); unset: a new key each start, which signs everyone "
        "out when the console restarts",
    )
    console_trace_url: str | None = Field(
        default=None,
        description="a trace's page in your tracing UI, {trace_id} replaced: a parked record's "
        "page links its trace there",
        examples=["http://jaeger.internal:16686/trace/{trace_id}"],
    )
    console_docs_url: str | None = Field(
        default=None,
        description="where this documentation is served: a stopped partition's runbook links "
        "there (unset: the page is named, not linked)",
        examples=["https://docs.example.com/outboxkit"],
    )
    console_secure_cookie: bool | None = Field(
        default=None,
        description="mark the session cookie Secure, sent over HTTPS only (unset: when the "
        "console serves HTTPS itself; set it true behind an HTTPS proxy)",
    )
    console_tls_cert_file: Path | None = Field(
        default=None,
        description="the console's TLS certificate chain (PEM): with its key, the console "
        "serves HTTPS",
        examples=["/run/secrets/console.crt"],
    )
    console_tls_key_file: Path | None = Field(
        default=None,
        description="the private key of the console's TLS certificate (PEM, a mounted secret)",
        examples=["/run/secrets/console.key"],
    )
    console_insecure_http: bool = Field(
        default=False,
        description="serve plain HTTP on an address beyond loopback, where TLS ends in front "
        "of the console (an HTTPS proxy; a container's port published on loopback); without "
        "it, or a certificate, the console refuses such an address",
    )


def variable(model: type[BaseModel], loc: Sequence[str | int]) -> tuple[str, FieldInfo | None]:
    """The environment variable that gave the value at ``loc`` (a pydantic error's location)
    of the settings class ``model``, upper-case, and that value's field (None when the
    variable holds a JSON object of several fields, or names no field)."""
    path = list(_until_index(loc))
    if not path:
        return "", None
    prefix, delimiter = _prefix(model), _delimiter(model)
    info = model.model_fields.get(path[0])
    name = _name(prefix, path[0], info)
    for part in path[1:]:
        nested = _model_of(info.annotation) if info is not None else None
        if not delimiter or nested is None or part not in nested.model_fields:
            return name.upper(), None  # a JSON value of the nested model's fields
        name, info = f"{name}{delimiter}{part}", nested.model_fields[part]
    return name.upper(), info


def variables(classes: Iterable[type[BaseModel]]) -> set[str]:
    """Every environment variable the settings ``classes`` read, upper-case: their fields',
    a nested model's fields' (with the nested delimiter) and those a nested settings class
    reads under its own prefix (its default, e.g. ``OUTBOXKIT_KAFKA_SECURITY_PROTOCOL``)."""
    names: set[str] = set()
    for model in classes:
        prefix, delimiter = _prefix(model), _delimiter(model)
        for field, info in model.model_fields.items():
            names |= _names(_name(prefix, field, info), info, delimiter)
    return names


def closest(name: str, known: Iterable[str], prefix: str = "OUTBOXKIT_") -> str | None:
    """The known variable ``name`` most likely misspells (None: none is close), compared
    without ``prefix``: every name that starts with it would look alike by the prefix alone."""

    def rest(variable: str) -> str:
        return variable[len(prefix) :] if variable.startswith(prefix) else variable

    rests = {rest(candidate): candidate for candidate in sorted(known)}
    found = difflib.get_close_matches(rest(name.upper()), sorted(rests), n=1, cutoff=0.75)
    return rests[found[0]] if found else None


def expected(name: str, info: FieldInfo | None) -> str:
    """What the variable ``name`` of the field ``info`` expects, and an example, as the end of
    a message ("; expected a whole number from 0 to 65535, e.g. NAME=9464"); empty when
    unknown."""
    if info is None or not name:
        return ""
    kind = _unoptional(info.annotation)
    form, example = _form(kind, info.metadata), _example(kind, info)
    text = f"; expected {form}" if form else ""
    if example is not None:
        text += f"{',' if form else ';'} e.g. {name}={shlex.quote(example)}"
    return text


def _form(kind: Any, metadata: list[Any]) -> str | None:
    """The form of a value of ``kind`` (None for text and paths: the error says what is wrong)."""
    origin = typing.get_origin(kind)
    if origin is Literal:
        return "one of " + ", ".join(str(v) for v in typing.get_args(kind))
    if origin is list:
        item = (typing.get_args(kind) or (str,))[0]
        return f"a JSON list of {_NOUNS.get(item, 'values')}"
    if kind is bool:
        return "true or false"
    if kind in (int, float):
        return ("a whole number" if kind is int else "a number") + _bounds(metadata)
    return None


_NOUNS = {str: "strings", Path: "paths", int: "whole numbers", float: "numbers"}


def _bounds(metadata: list[Any]) -> str:
    low = next((m.ge for m in metadata if hasattr(m, "ge")), None)
    above = next((m.gt for m in metadata if hasattr(m, "gt")), None)
    high = next((m.le for m in metadata if hasattr(m, "le")), None)
    if low is not None and high is not None:
        return f" from {low} to {high}"
    parts = [f"at least {low}"] if low is not None else []
    parts += [f"above {above}"] if above is not None else []
    parts += [f"at most {high}"] if high is not None else []
    return f" ({', '.join(parts)})" if parts else ""


def _example(kind: Any, info: FieldInfo) -> str | None:
    """A good value: the field's first example, else its default, else one of its type."""
    value: Any = None
    if info.examples:
        value = info.examples[0]
    elif info.default not in (None, PydanticUndefined, ""):
        value = info.default
    elif typing.get_origin(kind) is list and info.default_factory is not None:
        value = info.default_factory()  # type: ignore[call-arg]
    if value in (None, []):
        value = _typical(kind, info.metadata)
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return json.dumps([str(v) for v in value])
    return None if value is None else str(value)


def _typical(kind: Any, metadata: list[Any]) -> Any:
    if typing.get_origin(kind) is Literal:
        return typing.get_args(kind)[0]
    if kind is bool:
        return True
    if kind in (int, float):
        low = next((m.ge for m in metadata if hasattr(m, "ge")), None)
        above = next((m.gt for m in metadata if hasattr(m, "gt")), None)
        return low if low is not None else (above + 1 if above is not None else 1)
    return None


def _unoptional(annotation: Any) -> Any:
    """``annotation`` without its ``| None``."""
    if not _is_union(annotation):
        return annotation
    options = [o for o in typing.get_args(annotation) if o is not type(None)]
    return options[0] if len(options) == 1 else annotation


def _names(name: str, info: FieldInfo, delimiter: str | None) -> set[str]:
    names = {name.upper()}
    nested = _model_of(info.annotation)
    if nested is None:
        return names
    if issubclass(nested, BaseSettings):
        names |= variables([nested])
    if delimiter:
        for field, sub in nested.model_fields.items():
            names |= _names(f"{name}{delimiter}{field}", sub, delimiter)
    return names


def _until_index(loc: Sequence[str | int]) -> Iterable[str]:
    for part in loc:
        if not isinstance(part, str):
            return
        yield part


def _name(prefix: str, field: str, info: FieldInfo | None) -> str:
    alias = info.validation_alias if info is not None else None
    return alias if isinstance(alias, str) else f"{prefix}{field}"


def _prefix(model: type[BaseModel]) -> str:
    return str(model.model_config.get("env_prefix") or "")


def _delimiter(model: type[BaseModel]) -> str | None:
    delimiter = model.model_config.get("env_nested_delimiter")
    return str(delimiter) if delimiter else None


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model ``annotation`` names (``Model`` or ``Model | None``), else None."""
    options = typing.get_args(annotation) if _is_union(annotation) else (annotation,)
    models = [o for o in options if isinstance(o, type) and issubclass(o, BaseModel)]
    return models[0] if len(models) == 1 else None


def _is_union(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (typing.Union, types.UnionType)
