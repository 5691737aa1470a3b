"""`outbox.unnested`: rows bound as one array per column, one statement for any number of rows."""

from __future__ import annotations

from sqlalchemy import Column, Integer, MetaData, String, Table, select, update
from sqlalchemy.dialects import postgresql

from outbox import unnested, unnested_rows

stock = Table("stock", MetaData(), Column("sku", String, primary_key=True), Column("qty", Integer))
RESERVED = unnested("reserved", sku=String(), qty=Integer())
TAKE = update(stock).where(stock.c.sku == RESERVED.c.sku).values(qty=stock.c.qty - RESERVED.c.qty)


def sql(statement: object) -> str:
    return str(statement.compile(dialect=postgresql.dialect()))  # type: ignore[attr-defined]


def test_the_rows_are_one_array_parameter_per_column() -> None:
    text = sql(select(RESERVED.c.sku, RESERVED.c.qty))
    assert "unnest(%(reserved_sku)s::VARCHAR[], %(reserved_qty)s::INTEGER[])" in text
    assert "AS reserved(sku, qty)" in text


def test_parameters_are_the_columns_in_row_order() -> None:
    rows = [("a", 1), ("b", 2), ("c", 3)]
    assert unnested_rows(RESERVED, rows) == {
        "reserved_sku": ["a", "b", "c"],
        "reserved_qty": [1, 2, 3],
    }
    assert unnested_rows(RESERVED, []) == {"reserved_sku": [], "reserved_qty": []}


def test_an_update_binds_two_arrays_whatever_the_rows() -> None:
    # The alias's name prefixes every parameter: an UPDATE of stock may not bind :sku or :qty.
    # Two parameters, not one per row: the statement is compiled once for any number of rows.
    params = TAKE.compile(dialect=postgresql.dialect()).params
    assert set(params) == {"reserved_sku", "reserved_qty"}
    for n in (1, 1000):
        assert set(unnested_rows(RESERVED, [(str(i), i) for i in range(n)])) == set(params)
