"""Pure decoder of the pgoutput messages (protocol 1) that name inserted rows: Relation, Insert.

Used to read which outbox events wait in a replication slot (``pg_logical_slot_peek_binary_
changes``) while the connector task that should relay them is FAILED; the other message kinds
(Begin, Commit, Update, ...) are skipped.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

RELATION, INSERT = ord("R"), ord("I")


@dataclass(frozen=True)
class Relation:
    """A table as pgoutput describes it before its first change."""

    relid: int
    schema: str
    table: str
    columns: tuple[str, ...]


@dataclass(frozen=True)
class InsertedRow:
    """One inserted row: its table, its LSN and each column's text (None: SQL NULL)."""

    lsn: str
    schema: str
    table: str
    values: dict[str, str | None]


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return int(value)

    def string(self) -> str:
        end = self.data.index(0, self.at)
        text, self.at = self.data[self.at : end].decode(), end + 1
        return text

    def raw(self, size: int) -> bytes:
        chunk, self.at = self.data[self.at : self.at + size], self.at + size
        return chunk


def _relation(reader: _Reader) -> Relation:
    relid, schema, table = reader.take("!I"), reader.string(), reader.string()
    reader.take("!B")  # replica identity
    columns = []
    for _ in range(reader.take("!H")):
        reader.take("!B")  # flags
        columns.append(reader.string())
        reader.take("!I")  # type oid
        reader.take("!i")  # type modifier
    return Relation(relid, schema, table, tuple(columns))


def _tuple(reader: _Reader) -> list[str | None]:
    values: list[str | None] = []
    for _ in range(reader.take("!H")):
        kind = chr(reader.take("!B"))
        # 'n' is NULL; 'u' an unchanged TOASTed value (never in an insert); 't' text.
        values.append(reader.raw(reader.take("!I")).decode() if kind == "t" else None)
    return values


def inserted_rows(messages: Iterable[tuple[str, bytes]]) -> Iterator[InsertedRow]:
    """The inserts among ``(lsn, message)`` pairs, in order, named by the Relation messages."""
    relations: dict[int, Relation] = {}
    for lsn, message in messages:
        reader = _Reader(bytes(message))
        kind = reader.take("!B")
        if kind == RELATION:
            relation = _relation(reader)
            relations[relation.relid] = relation
        elif kind == INSERT:
            known = relations[reader.take("!I")]
            reader.take("!B")  # 'N': a new tuple follows
            values = dict(zip(known.columns, _tuple(reader), strict=True))
            yield InsertedRow(lsn, known.schema, known.table, values)
