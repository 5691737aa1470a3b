"""Event schemas committed with the code, and the compatibility check between them and the models.

`export` writes each contract's JSON Schema to ``<folder>/<event type>/v<version>.json``; old
versions' files stay, as the record of what was published. `check` compares the models with the
committed files and names every change that would break a deployed service:

- **backward**: a consumer on the new model must read events published with the old one (they sit
  in Kafka and in the parked table): a field the new model requires that the old did not always
  write, a type or enum it no longer accepts, a bound or pattern it tightened;
- **forward**: a consumer still on the old model must read events published with the new one: a
  field the old model requires that the new one no longer writes (removed, or made optional), a
  type or value it does not know, an extra field where the old model forbade extras.

Both directions must hold within one version (schema registries call this FULL). A change that
breaks either needs the version raised, and, for the consumers, an upcaster from the old one:
`check` asks for each step's upcaster. The rules cover the JSON Schema pydantic generates:
objects, arrays, strings, numbers, enums and constants, ``anyOf`` (optional fields) and ``$ref``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from outbox.contracts import Contracts, Event

Schema = Mapping[str, Any]
_BOUNDS_LOW = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties")
_BOUNDS_HIGH = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties")


def schema_of(model: type[Event]) -> dict[str, Any]:
    """``model``'s JSON Schema with its event type, aggregate, version and key."""
    schema = model.model_json_schema()
    schema["x-event-type"] = model.event_type
    schema["x-aggregate-type"] = model.aggregate_type
    schema["x-version"] = model.version
    if model.key is not None:
        schema["x-key"] = model.key
    return schema


def path_of(folder: Path, event_type: str, version: int) -> Path:
    return folder / event_type / f"v{version}.json"


def export(contracts: Contracts, folder: Path) -> list[Path]:
    """Write every contract's current schema; the paths written (older versions are kept)."""
    written = []
    for model in contracts.models.values():
        path = path_of(folder, model.event_type, model.version)
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(schema_of(model), indent=2, sort_keys=True) + "\n"
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            written.append(path)
    return written


def committed_versions(folder: Path, event_type: str) -> list[int]:
    """The versions of ``event_type`` with a schema in ``folder``, ascending."""
    directory = folder / event_type
    if not directory.is_dir():
        return []
    names = (p.stem for p in directory.glob("v*.json"))
    return sorted(int(n[1:]) for n in names if n[1:].isdigit())


@dataclass
class Report:
    """What `check` found: ``problems`` fail it; ``notes`` are compatible changes to export."""

    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def check(contracts: Contracts, folder: Path) -> Report:
    """Compare every contract with the committed schemas in ``folder``."""
    report = Report()
    upcasters = contracts.upcasters()
    for model in contracts.models.values():
        name, version = model.event_type, model.version
        versions = committed_versions(folder, name)
        if versions and versions[-1] > version:
            report.problems.append(
                f"{name}: {folder} has v{versions[-1]}, the model is at v{version} (a version "
                f"cannot go back: events of v{versions[-1]} may have been published)"
            )
            continue
        current = schema_of(model)
        path = path_of(folder, name, version)
        if version in versions:
            old = json.loads(path.read_text())
            broken = [f"backward: {p}" for p in readable(old, current, old, current)]
            broken += [f"forward: {p}" for p in readable(current, old, current, old)]
            if broken:
                report.problems.append(
                    f"{name} v{version} changed incompatibly since it was exported ("
                    + "; ".join(broken)
                    + f"): raise its version to v{version + 1} and register an upcaster from "
                    f"v{version}"
                )
            elif _comparable(old) != _comparable(current):
                report.notes.append(f"{name} v{version}: compatible change; export it again")
        else:
            report.problems.append(
                f"{name} v{version} is not in {folder}: run `outboxkit schemas export` and "
                "commit it"
            )
        first = versions[0] if versions else version
        missing = [v for v in range(first, version) if (name, v) not in upcasters]
        for step in missing:
            report.problems.append(
                f"{name}: no upcaster from v{step} to v{step + 1}, so events of v{step} "
                "cannot be applied by this consumer"
            )
    return report


def _comparable(schema: Schema) -> Any:
    """The schema without what does not change what it accepts (titles, descriptions)."""
    if isinstance(schema, Mapping):
        return {
            k: _comparable(v)
            for k, v in schema.items()
            if k not in ("title", "description", "examples")
        }
    if isinstance(schema, list):
        return [_comparable(v) for v in schema]
    return schema


def readable(
    writer: Schema, reader: Schema, writer_root: Schema, reader_root: Schema, at: str = ""
) -> list[str]:
    """Why a document valid under ``writer`` may be refused by ``reader`` (empty: it never is,
    as far as these rules tell). The roots resolve ``$ref``s."""
    writer, reader = _resolve(writer, writer_root), _resolve(reader, reader_root)
    where = at or "payload"
    if "anyOf" in writer:
        return _all([readable(w, reader, writer_root, reader_root, at) for w in writer["anyOf"]])
    if "anyOf" in reader:
        tries = [readable(writer, r, writer_root, reader_root, at) for r in reader["anyOf"]]
        if any(not t for t in tries):
            return []
        return [f"{where}: accepted as none of {_types(reader)}"]
    problems = _values(writer, reader, where)
    if problems:
        return problems
    if _type_set(writer) & {"object"} and "properties" in reader:
        problems += _objects(writer, reader, writer_root, reader_root, at)
    if _type_set(writer) & {"array"} and "items" in reader:
        items = writer.get("items", {})
        problems += readable(items, reader["items"], writer_root, reader_root, f"{at}[]")
    return problems


def _objects(
    writer: Schema, reader: Schema, writer_root: Schema, reader_root: Schema, at: str
) -> list[str]:
    problems = []
    written, read = writer.get("properties", {}), reader.get("properties", {})
    always = set(writer.get("required", ()))
    for name in reader.get("required", ()):
        if name not in always:
            state = "optional" if name in written else "absent"
            problems.append(f"{_join(at, name)}: required, but {state} in what is written")
    for name, schema in written.items():
        if name in read:
            problems += readable(schema, read[name], writer_root, reader_root, _join(at, name))
        elif reader.get("additionalProperties") is False:
            problems.append(f"{_join(at, name)}: written, but extra fields are forbidden")
    return problems


def _values(writer: Schema, reader: Schema, where: str) -> list[str]:
    """Type, enum/const, bounds and pattern of one schema node."""
    wanted, given = _type_set(reader), _type_set(writer)
    accepted = wanted | ({"integer"} if "number" in wanted else set())
    if wanted and not given:
        return [f"{where}: any type is written, only {'/'.join(sorted(wanted))} accepted"]
    if wanted and not given <= accepted:
        refused = "/".join(sorted(given - accepted))
        return [f"{where}: type {refused} is not accepted (only {'/'.join(sorted(wanted))})"]
    allowed, written = _enum(reader), _enum(writer)
    if allowed is not None:
        if written is None:
            return [f"{where}: any value is written, only {sorted(map(str, allowed))} accepted"]
        if not written <= allowed:
            return [f"{where}: values {sorted(map(str, written - allowed))} are not accepted"]
    problems = []
    for bound in _BOUNDS_LOW:
        if bound in reader and (bound not in writer or writer[bound] < reader[bound]):
            problems.append(f"{where}: {bound} {writer.get(bound)} -> {reader[bound]}")
    for bound in _BOUNDS_HIGH:
        if bound in reader and (bound not in writer or writer[bound] > reader[bound]):
            problems.append(f"{where}: {bound} {writer.get(bound)} -> {reader[bound]}")
    if "pattern" in reader and writer.get("pattern") != reader["pattern"]:
        problems.append(f"{where}: pattern {writer.get('pattern')!r} -> {reader['pattern']!r}")
    return problems


def _type_set(schema: Schema) -> set[str]:
    kind = schema.get("type")
    if kind is None:
        if "const" in schema:
            return {_json_type(schema["const"])}
        if "enum" in schema:
            return {_json_type(v) for v in schema["enum"]}
        return set()
    return set(kind) if isinstance(kind, list) else {kind}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, dict) else "string"


def _enum(schema: Schema) -> set[Any] | None:
    if "const" in schema:
        return {json.dumps(schema["const"])}
    if "enum" in schema:
        return {json.dumps(v) for v in schema["enum"]}
    return None


def _resolve(schema: Schema, root: Schema) -> Schema:
    seen = 0
    while "$ref" in schema and seen < 32:
        ref = schema["$ref"]
        if not ref.startswith("#/"):
            raise ValueError(f"only local $refs are supported, not {ref}")
        target: Any = root
        for part in ref[2:].split("/"):
            target = target[part]
        schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
        seen += 1
    return schema


def _all(results: Iterable[list[str]]) -> list[str]:
    return [p for r in results for p in r]


def _join(at: str, name: str) -> str:
    return f"{at}.{name}" if at else name


def _types(schema: Schema) -> str:
    return "/".join(sorted(t for s in schema.get("anyOf", ()) for t in _type_set(s))) or "any"
