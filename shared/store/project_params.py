"""Persistent params in the store: the string values ``param_set>`` stores for a project and
``param_get>`` reads back in any later session of that project.

As in Digdag's param server, a value lives for :data:`PARAM_TTL` after it was last set; an
older one reads as missing. Values stay when their project is deleted (Digdag's outlive
projects too) and come back if a project of that name is pushed again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

from sqlalchemy import Connection, select

from tickwork.shared.store.dialects import dialect_of
from tickwork.shared.store.tables import project_params

PARAM_TTL = timedelta(days=90)
"""How long a stored value lives after it was last set (Digdag's 7,776,000 seconds)."""


def set_project_params(
    conn: Connection, project_id: int, values: Mapping[str, str], now: datetime
) -> None:
    """Store each of ``values`` under its key for the project, replacing what was there."""
    table = project_params
    insert = dialect_of(conn).insert_ignoring_conflicts(table, index_elements=["project_id", "key"])
    for key, value in values.items():
        row = {"project_id": project_id, "key": key, "value": value, "updated_at": now}
        inserted = conn.execute(insert.values(**row).returning(table.c.key)).scalar()
        if inserted is None:  # the key was there: replace its value
            where = (table.c.project_id == project_id) & (table.c.key == key)
            conn.execute(table.update().where(where).values(value=value, updated_at=now))


def get_project_params(
    conn: Connection, project_id: int, keys: Iterable[str], now: datetime
) -> dict[str, str]:
    """The project's live values of ``keys`` by key; a key never set, or not set within
    :data:`PARAM_TTL`, is absent."""
    wanted = sorted(set(keys))
    if not wanted:
        return {}
    table = project_params
    query = select(table.c.key, table.c.value).where(
        table.c.project_id == project_id,
        table.c.key.in_(wanted),
        table.c.updated_at >= now - PARAM_TTL,
    )
    return {str(row.key): str(row.value) for row in conn.execute(query)}
