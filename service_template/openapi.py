"""What a service's OpenAPI document says about errors: every answer the template itself gives
is declared on every operation that can get it, as ``application/problem+json`` (RFC 9457), so
the document says what the service does and clients (and schemathesis) can rely on it.

- every operation but /health: 503 (the database unreachable; ``Retry-After``);
- every operation with parameters or a body: 422 (a value off its schema);
- every operation with a body: 400 (a body that cannot be parsed) and 413 (over the limit);
- what a route answers itself it declares with ``responses=problems(404, ...)``."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from service_template.errors import PROBLEM, title

PROBLEM_SCHEMA: dict[str, Any] = {
    "title": "Problem",
    "description": "RFC 9457 problem details",
    "type": "object",
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "errors": {"type": "array", "items": {"type": "object"}},
    },
    "required": ["type", "title", "status", "detail"],
}
_REF = {"$ref": "#/components/schemas/Problem"}
_RETRY_AFTER = {"Retry-After": {"description": "seconds to wait", "schema": {"type": "integer"}}}


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses=`` of a route that answers these statuses as problem+json."""
    return {s: {"description": title(s), "content": {PROBLEM: {"schema": _REF}}} for s in statuses}


def install(app: FastAPI) -> None:
    """Generate ``app``'s document once, with the template's error answers declared."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            declare(document)
            app.openapi_schema = document
        return app.openapi_schema

    setattr(app, "openapi", openapi)  # noqa: B010 -- FastAPI's documented way to replace it


def declare(document: dict[str, Any]) -> None:
    """Add the template's answers to every operation of ``document``."""
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    schemas["Problem"] = PROBLEM_SCHEMA
    schemas.pop("HTTPValidationError", None)  # FastAPI's 422 body: ours is a Problem
    schemas.pop("ValidationError", None)
    for path, operations in document.get("paths", {}).items():
        for operation in operations.values():
            responses = operation.setdefault("responses", {})
            wanted: list[int] = []
            if operation.get("parameters") or "requestBody" in operation:
                wanted.append(422)
            if "requestBody" in operation:
                wanted += [400, 413]
            if path != "/health":
                wanted.append(503)
            for status in wanted:
                responses[str(status)] = problems(status)[status]
            for status, response in responses.items():
                if status.startswith(("4", "5")):
                    response["content"] = {PROBLEM: {"schema": _REF}}
            if "503" in responses:
                responses["503"]["headers"] = _RETRY_AFTER
