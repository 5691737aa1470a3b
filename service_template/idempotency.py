"""Idempotency keys of HTTP requests: the rules of the Idempotency-Key header, the
service template's one table (one row per (route, key) holding a fingerprint of the request and
its first response), the statements on it and `idempotent`, which stores a key in the request's
transaction.

The framework's migration chain creates the table (revision 0003, next to the outbox and inbox
tables, since every service database runs that chain; a revision is a snapshot of the schema, so
it spells the table out rather than importing it); `tests/integration/test_alembic_check.py`
compares the declaration here with what the chain creates."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import Header, Request
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse
from sqlalchemy import (
    Column,
    DateTime,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    bindparam,
    func,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB

from outbox.aio import AsyncUnitOfWork
from outbox.unit import UnitOfWork
from service_template.errors import Problem

metadata = MetaData()

idempotency = Table(
    "service_idempotency",
    metadata,
    Column("scope", String(255), nullable=False),
    Column("key", String(255), nullable=False),
    Column("fingerprint", String(64), nullable=False),
    Column("status_code", Integer, nullable=True),
    Column("response", JSONB, nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("scope", "key"),
    Index("ix_service_idempotency_created", "created_at"),
)

MAX_KEY = 255
# Visible ASCII and space: what an HTTP header carries unmangled (a 400 otherwise).
KEY_PATTERN = rf"^[\x20-\x7e]{{1,{MAX_KEY}}}$"
_KEY = re.compile(KEY_PATTERN)
IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        description="Retries with the same key and body get the first response and create "
        "nothing; the same key with another body is a 409 Conflict.",
        # Documented, and checked by `idempotent` (a 400, not FastAPI's 422).
        json_schema_extra={"minLength": 1, "maxLength": MAX_KEY, "pattern": KEY_PATTERN},
    ),
]


# Built once: a statement made per request costs more CPU in SQLAlchemy (its construction and
# cache key) than its round trip to Postgres. The claim is text: SQLAlchemy cannot cache the
# PostgreSQL dialect's INSERT (it compiled it again for every request).
_CLAIM = text(
    f"INSERT INTO {idempotency.name} (scope, key, fingerprint)"
    " VALUES (:scope, :key, :fingerprint) ON CONFLICT DO NOTHING RETURNING key"
)
_THE_KEY = (idempotency.c.scope == bindparam("the_scope")) & (
    idempotency.c.key == bindparam("the_key")
)
_FIRST = select(idempotency.c.fingerprint, idempotency.c.status_code, idempotency.c.response).where(
    _THE_KEY
)
_RECORD = update(idempotency).where(_THE_KEY)


def idempotent(
    uow: UnitOfWork,
    request: Request,
    key: str | None,
    body: Any,
    produce: Callable[[], tuple[int, Any]],
) -> JSONResponse:
    """Run ``produce`` (returning status and body) once per Idempotency-Key.

    The key, a fingerprint of the request and the response are stored in this transaction:
    a retry with the same key and body gets the first response and creates nothing; the same
    key with another body is a 409 (the key is taken: a conflict with state, which the
    document can declare; the body alone is valid). A concurrent retry waits on the key's row
    lock.

    Args:
        uow: The request's unit of work (`unit_of_work`): the key is stored in its transaction.
        request: The request; its method and path scope the key.
        key: The request's Idempotency-Key header (`IdempotencyKey`); None runs ``produce``
            without storing anything.
        body: The request's body, fingerprinted to tell a retry from another request.
        produce: Does the route's work and returns the response's status and body; run once
            per key.
    """
    if key is None:
        status, payload = produce()
        return JSONResponse(_jsonable(payload), status_code=status)
    scope, fingerprint, at = _claim_of(request, key, body)
    claimed = uow.session.execute(
        _CLAIM, {"scope": scope, "key": key, "fingerprint": fingerprint}
    ).first()
    if claimed is None:
        return _replayed(uow.session.execute(_FIRST, at).one(), fingerprint)
    status, payload = produce()
    encoded = _jsonable(payload)
    uow.session.execute(_RECORD, {**at, "status_code": status, "response": encoded})
    return JSONResponse(encoded, status_code=status)


async def idempotent_async(
    uow: AsyncUnitOfWork,
    request: Request,
    key: str | None,
    body: Any,
    produce: Callable[[], Awaitable[tuple[int, Any]]],
) -> JSONResponse:
    """`idempotent` for ``async def`` routes: awaits ``produce`` once per Idempotency-Key, the
    key stored in the async unit's transaction, with the same rules and answers.

    Args:
        uow: The request's async unit of work (`async_unit_of_work`).
        request: The request; its method and path scope the key.
        key: The request's Idempotency-Key header (`IdempotencyKey`); None awaits ``produce``
            without storing anything.
        body: The request's body, fingerprinted to tell a retry from another request.
        produce: Does the route's work and returns the response's status and body; awaited
            once per key.
    """
    if key is None:
        status, payload = await produce()
        return JSONResponse(_jsonable(payload), status_code=status)
    scope, fingerprint, at = _claim_of(request, key, body)
    session = uow.session
    claimed = (
        await session.execute(_CLAIM, {"scope": scope, "key": key, "fingerprint": fingerprint})
    ).first()
    if claimed is None:
        return _replayed((await session.execute(_FIRST, at)).one(), fingerprint)
    status, payload = await produce()
    encoded = _jsonable(payload)
    await session.execute(_RECORD, {**at, "status_code": status, "response": encoded})
    return JSONResponse(encoded, status_code=status)


def _claim_of(request: Request, key: str, body: Any) -> tuple[str, str, dict[str, str]]:
    """The key's scope (method and path), the request's fingerprint, and the key's row."""
    if not _KEY.fullmatch(key):
        raise Problem(400, f"Idempotency-Key must be 1 to {MAX_KEY} visible ASCII characters")
    scope = f"{request.method} {request.url.path}"
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), default=jsonable_encoder)
    fingerprint = hashlib.sha256(f"{scope}\n{canonical}".encode()).hexdigest()
    return scope, fingerprint, {"the_scope": scope, "the_key": key}


def _replayed(row: Any, fingerprint: str) -> JSONResponse:
    """The first response of a key, for a retry of the same request (a 409 for another)."""
    if row.fingerprint != fingerprint:
        raise Problem(409, "this Idempotency-Key was used with a different request body")
    return JSONResponse(
        row.response, status_code=row.status_code, headers={"Idempotent-Replayed": "true"}
    )


_NATIVE = (str, int, float, bool, type(None))


def _jsonable(value: Any) -> Any:
    """``value`` as JSON-native data: itself when it already is (what a route returning
    ``model_dump(mode="json")`` gives, checked without copying), else FastAPI's encoding."""
    if _is_native(value):
        return value
    return jsonable_encoder(value)


def _is_native(value: Any) -> bool:
    if isinstance(value, _NATIVE):
        return True
    if type(value) is dict:
        return all(type(k) is str and _is_native(v) for k, v in value.items())
    if type(value) is list:
        return all(_is_native(v) for v in value)
    return False
