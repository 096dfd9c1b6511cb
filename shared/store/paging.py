"""Keyset pages: rows ordered by id, newest first, after a given id; a deep page costs
what the first does."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Connection, Row, Select


@dataclass(frozen=True)
class KeysetPage:
    """One page of rows, and the id to pass as ``after`` for the next (None: last page)."""

    rows: Sequence[Row[Any]]
    next_after: int | None


def fetch_keyset_page(
    conn: Connection,
    query: Select[Any],
    id_column: ColumnElement[Any],
    *,
    after: int | None,
    limit: int,
    id_key: str | None = None,
) -> KeysetPage:
    """``query WHERE id < :after ORDER BY id DESC LIMIT limit + 1``, as a page.

    ``query`` must select ``id_column`` (under ``id_key`` when it is labelled) and have no
    ORDER BY or LIMIT of its own. The extra row only tells whether a next page exists.
    """
    if limit < 1:
        raise ValueError("a page holds at least one row")
    if after is not None:
        query = query.where(id_column < after)
    rows = conn.execute(query.order_by(id_column.desc()).limit(limit + 1)).all()
    if len(rows) <= limit:
        return KeysetPage(rows, None)
    key = id_key or getattr(id_column, "key", None) or "id"
    return KeysetPage(rows[:limit], int(rows[limit - 1]._mapping[key]))
