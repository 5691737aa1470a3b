"""Many rows as one statement's parameters, one array per column read by Postgres's
``unnest()``: for a handler or a route writing a batch of business rows in the caller's unit of
work (``uow.session.execute(statement, unnested_rows(rows, values))``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import TableValuedAlias, bindparam, column, func
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.types import TypeEngine


def unnested(name: str, **columns: TypeEngine[Any]) -> TableValuedAlias:
    """Rows bound as one array per column: ``unnest(:name_a, :name_b) AS name(a, b)``.

    Executed with ``{"name_a": [...], "name_b": [...]}``, as `unnested_rows` builds them (the
    alias's name is in each parameter's: an UPDATE may not bind the name of one of its table's
    columns). The statement is the same for any number of rows, so SQLAlchemy compiles it once;
    a multi-row VALUES list is a new statement for each number of rows, compiled on every call
    (a fifth of the CPU of the saga's consumer workers when its handlers used them).

    Args:
        name: The alias the statement reads the rows by (``FROM name`` or ``name.c.a``).
        **columns: Each column's name and SQL type, in the order of a row's values.
    """
    arrays = (bindparam(_array(name, c), type_=ARRAY(kind)) for c, kind in columns.items())
    shape = (column(c, kind) for c, kind in columns.items())
    return func.unnest(*arrays).table_valued(*shape).render_derived(name=name)


def unnested_rows(rows: TableValuedAlias, values: Iterable[Sequence[Any]]) -> dict[str, list[Any]]:
    """The parameters of `unnested` ``rows`` for ``values``: each column's array by name.

    Args:
        rows: What `unnested` returned.
        values: One tuple per row, its values in the order of the columns (none: empty arrays).
    """
    by_column = list(zip(*values, strict=True)) or [()] * len(rows.c)
    return {_array(rows.name, c.key): list(v) for c, v in zip(rows.c, by_column, strict=True)}


def _array(name: str, column_name: str) -> str:
    """The name of the parameter that carries one column of `unnested` ``name``."""
    return f"{name}_{column_name}"
