"""Every parameter the Python API reference shows is explained there: for each name in a
framework package's ``__all__``, each parameter of a function, of a class's constructor (its
``__init__``, dataclass or NamedTuple fields) and of the class's public methods is described in
the docstring's ``Args:`` or ``Attributes:`` section (google style, as mkdocstrings renders it,
the class's and its ``__init__``'s merged), and each pydantic field has a ``description``."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from griffe import Docstring, DocstringSectionKind, Parser
from pydantic import BaseModel

ROOT = Path(__file__).resolve().parents[2]
# The sections whose entries name a parameter or a field.
NAMING = (DocstringSectionKind.parameters, DocstringSectionKind.attributes)


def _reference_packages() -> tuple[str, ...]:
    """PACKAGES of docs/hooks/api_reference.py: the packages with a reference page."""
    spec = importlib.util.spec_from_file_location(
        "api_reference", ROOT / "docs" / "hooks" / "api_reference.py"
    )
    assert spec is not None and spec.loader is not None
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    return tuple(hook.PACKAGES)


def described(doc: str | None) -> set[str]:
    """The names a google-style docstring's Args and Attributes sections describe."""
    if not doc:
        return set()
    logging.getLogger("griffe").setLevel(logging.ERROR)  # no annotations: no parent to read
    sections = Docstring(inspect.cleandoc(doc)).parse(Parser.google)
    return {
        item.name.lstrip("*")
        for section in sections
        if section.kind in NAMING
        for item in section.value
        if item.description.strip()
    }


def parameters(function: Callable[..., Any]) -> list[str]:
    """The named public parameters of ``function``: not self or cls, not ``*args`` or
    ``**kwargs``, not a private one (``_name``, e.g. a dataclass's internal field)."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # a builtin without a signature
        return []
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return [
        p.name
        for p in signature.parameters.values()
        if p.kind not in variadic and p.name not in ("self", "cls") and not p.name.startswith("_")
    ]


def public_methods(cls: type) -> Iterator[tuple[str, Callable[..., Any]]]:
    """The class's own public methods (properties and pydantic validators left out)."""
    for name, value in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(value, classmethod | staticmethod):
            yield name, value.__func__
        elif inspect.isfunction(value):
            yield name, value


def class_missing(cls: type) -> list[str]:
    """The constructor parameters and fields of ``cls`` that its docstrings do not describe."""
    own_init = vars(cls).get("__init__")
    names = described(cls.__doc__) | described(getattr(own_init, "__doc__", None))
    if issubclass(cls, BaseModel):
        fields = cls.model_fields.items()
        missing = [n for n, field in fields if not field.description and n not in names]
    else:  # the constructor's: __init__, __new__ (a NamedTuple), or a dataclass's generated
        missing = [p for p in parameters(cls) if p not in names]
    for method_name, method in public_methods(cls):
        documented = described(method.__doc__)
        missing += [f"{method_name}({p})" for p in parameters(method) if p not in documented]
    return missing


def undescribed(package: str) -> dict[str, list[str]]:
    """Each public name of ``package`` with its parameters that have no description."""
    module = importlib.import_module(package)
    found: dict[str, list[str]] = {}
    for name in module.__all__:
        value = getattr(module, name)
        if inspect.isclass(value):
            missing = class_missing(value)
        elif inspect.isfunction(value) or inspect.isbuiltin(value):
            documented = described(value.__doc__)
            missing = [p for p in parameters(value) if p not in documented]
        else:  # constants, tables, metadata, type aliases: no parameters
            continue
        if missing:
            found[f"{package}.{name}"] = missing
    return found


@pytest.mark.parametrize("package", _reference_packages())
def test_public_parameters_are_described(package: str) -> None:
    missing = undescribed(package)
    lines = "\n".join(f"  {name}: {', '.join(params)}" for name, params in missing.items())
    assert not missing, (
        "describe these parameters in the docstring's Args: (Attributes: for a dataclass or a "
        f"NamedTuple's fields; Field(description=...) for a pydantic model's):\n{lines}"
    )


def test_a_parameter_without_description_is_found() -> None:
    def add(a: int, b: int = 0, *args: int, c: int = 0, _d: int = 0, **kwargs: int) -> None:
        """Add.

        Args:
            a: The first.
            b:
        """

    assert parameters(add) == ["a", "b", "c"]
    assert described(add.__doc__) == {"a"}
