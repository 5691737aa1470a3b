"""The idempotency keys of HTTP requests, the service template's one table: one row per (route,
Idempotency-Key) holding the first response, written in the request's transaction
(`service_template.uow.idempotent`).

The framework's migration chain creates it (revision 0003, next to the outbox and inbox tables,
since every service database runs that chain); it is declared here, with the code that uses it,
and `tests/integration/test_alembic_check.py` compares this declaration with what the chain
creates."""

from __future__ import annotations

from sqlalchemy import (
    Column,
    DateTime,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    func,
)
from sqlalchemy.dialects.postgresql import JSONB

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
