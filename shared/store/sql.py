"""Small SQL helpers that differ between SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Table
from sqlalchemy.dialects import postgresql, sqlite


def insert_ignoring_conflict(conn: Connection, table: Table, values: dict[str, Any]) -> int | None:
    """``INSERT ... ON CONFLICT DO NOTHING RETURNING id``: the new id, or None on a conflict."""
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    statement = (
        dialect.insert(table).values(**values).on_conflict_do_nothing().returning(table.c.id)
    )
    inserted = conn.execute(statement).scalar_one_or_none()
    return None if inserted is None else int(inserted)
