"""Small bulk SQL helpers of the query modules, on whichever database a connection uses.

The SQL itself differs between SQLite and PostgreSQL: it lives in
:mod:`tickwork.shared.store.dialects`, and these helpers hand each statement to the connection's
dialect component.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from sqlalchemy import ColumnElement, Connection, Row, Table

from tickwork.shared.store.dialects import dialect_of
from tickwork.shared.store.unnest import column_types, rows_select

__all__ = [
    "column_types",
    "in_ids",
    "insert_ignoring_conflict",
    "insert_rows",
    "rows_select",
    "update_rows",
]


def insert_ignoring_conflict(conn: Connection, table: Table, values: dict[str, Any]) -> int | None:
    """``INSERT ... ON CONFLICT DO NOTHING RETURNING id``: the new id, or None on a conflict."""
    statement = (
        dialect_of(conn).insert_ignoring_conflicts(table).values(**values).returning(table.c.id)
    )
    inserted = conn.execute(statement).scalar_one_or_none()
    return None if inserted is None else int(inserted)


def insert_rows(
    conn: Connection,
    table: Table,
    rows: Sequence[Mapping[str, Any]],
    returning: Sequence[ColumnElement[Any]],
    *,
    ignore_conflicts: bool = False,
) -> Sequence[Row[*tuple[Any, ...]]]:
    """Insert ``rows`` (all with the same keys) in one statement; the ``returning`` columns.

    With ``ignore_conflicts``, rows that violate a unique key are skipped
    (``ON CONFLICT DO NOTHING``) and return nothing.
    """
    if not rows:
        return []
    return dialect_of(conn).insert_rows(
        conn, table, rows, returning, ignore_conflicts=ignore_conflicts
    )


def update_rows(
    conn: Connection,
    table: Table,
    rows: Sequence[Mapping[str, Any]],
    constant_values: Mapping[str, Any],
) -> None:
    """Update many rows of ``table`` in one statement: each of ``rows`` names its ``id`` and
    the values it sets (all with the same keys); ``constant_values`` go to every row."""
    if rows:
        dialect_of(conn).update_rows(conn, table, rows, constant_values)


def in_ids(
    conn: Connection, column: ColumnElement[Any], ids: Collection[int]
) -> ColumnElement[bool]:
    """``column IN (ids)``; on PostgreSQL with the ids written into the statement, not bound
    (each run is then planned for its own ids)."""
    numbers = [int(i) for i in ids]  # int(): nothing but digits reaches the SQL text
    return dialect_of(conn).in_ids(column, numbers)
