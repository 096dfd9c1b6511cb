"""Keyset pages: rows ordered by id, newest first, after a given id; a deep page costs
what the first does."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Connection, Integer, Row, Select, bindparam

AFTER_PARAM = "keyset_after"
"""The bound parameter of a page statement's ``id < :after``."""
LIMIT_PARAM = "keyset_limit"
"""The bound parameter of a page statement's ``LIMIT``."""


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


def keyset_statement(
    query: Select[Any], id_column: ColumnElement[Any], *, after: bool
) -> Select[Any]:
    """``query``'s page statement, made once and run many times: ``WHERE id < :after``
    (when ``after``) ``ORDER BY id DESC LIMIT :limit``, both bound
    (:func:`fetch_statement_page` binds them). A statement kept this way is built and its
    cache key computed once, not on every page."""
    if after:
        query = query.where(id_column < bindparam(AFTER_PARAM, type_=id_column.type))
    return query.order_by(id_column.desc()).limit(bindparam(LIMIT_PARAM, type_=Integer()))


def fetch_statement_page(
    conn: Connection,
    statement: Select[Any],
    params: Mapping[str, Any],
    *,
    after: int | None,
    limit: int,
) -> KeysetPage:
    """A page of a :func:`keyset_statement` (made with ``after=after is not None``) whose
    first column is the id; ``params`` binds the statement's own parameters."""
    if limit < 1:
        raise ValueError("a page holds at least one row")
    bound = {**params, LIMIT_PARAM: limit + 1}
    if after is not None:
        bound[AFTER_PARAM] = after
    rows = conn.execute(statement, bound).all()
    if len(rows) <= limit:
        return KeysetPage(rows, None)
    return KeysetPage(rows[:limit], int(rows[limit - 1][0]))
