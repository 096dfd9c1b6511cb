"""Paged lists: ``limit`` and an opaque ``cursor`` in, ``{"items", "next_cursor"}`` out."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Sequence
from typing import Any

from flask import current_app
from pydantic import Field
from sqlalchemy import ColumnElement, Connection, Row, Select

from tickwork.services.api.errors import InvalidParameter
from tickwork.services.api.models import RequestQuery
from tickwork.shared.domain.storable import MAX_INTEGER
from tickwork.shared.store.paging import fetch_keyset_page

DEFAULT_LIMIT = 100
MAX_ID = MAX_INTEGER  # ids are 64-bit integers
CURSOR_PREFIX = "k1:"


class PageQuery(RequestQuery):
    """The paging parameters every list takes; list queries extend it with their filters."""

    limit: int = Field(
        DEFAULT_LIMIT,
        ge=1,
        description="Items per page (at most the server's "
        "TICKWORK_API_PAGE_LIMIT, 1000 by default).",
    )
    cursor: str | None = Field(
        None, max_length=200, description="`next_cursor` of the page before."
    )


def encode_cursor(after: int) -> str:
    """The opaque cursor standing for "ids below ``after``"."""
    return base64.urlsafe_b64encode(f"{CURSOR_PREFIX}{after}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    """The id a cursor stands for; InvalidParameter (``cursor``) if it was not made here."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        text = base64.urlsafe_b64decode(padded.encode("ascii")).decode("ascii")
    except (ValueError, binascii.Error, UnicodeError):
        raise InvalidParameter("cursor", "not a cursor this server gave") from None
    digits = text.removeprefix(CURSOR_PREFIX)
    if not text.startswith(CURSOR_PREFIX) or not digits.isdigit() or len(digits) > 19:
        raise InvalidParameter("cursor", "not a cursor this server gave")
    after = int(digits)
    if not 0 < after <= MAX_ID:
        raise InvalidParameter("cursor", "not a cursor this server gave")
    return after


def cursor_after(query: PageQuery) -> int | None:
    """The id the query's cursor stands for (None: the first page)."""
    return decode_cursor(query.cursor) if query.cursor else None


def next_cursor(next_after: int | None) -> str | None:
    """The cursor of the page after one whose last id is ``next_after`` (None: no more)."""
    return None if next_after is None else encode_cursor(next_after)


def page_limit(query: PageQuery) -> int:
    """The page size asked for; InvalidParameter (``limit``) past the server's maximum."""
    maximum: int = current_app.config["TICKWORK_PAGE_LIMIT"]
    if query.limit > maximum:
        raise InvalidParameter("limit", f"must be at most {maximum}")
    return query.limit


def fetch_page(
    conn: Connection,
    select: Select[Any],
    id_column: ColumnElement[Any],
    query: PageQuery,
    *,
    id_key: str | None = None,
) -> tuple[Sequence[Row[Any]], str | None]:
    """One page of ``select`` (newest id first), and the cursor of the next (None: last)."""
    after = cursor_after(query)
    page = fetch_keyset_page(
        conn, select, id_column, after=after, limit=page_limit(query), id_key=id_key
    )
    return page.rows, next_cursor(page.next_after)


def paged_list(
    conn: Connection,
    select: Select[Any],
    id_column: ColumnElement[Any],
    query: PageQuery,
    to_item: Callable[[Row[Any]], dict[str, Any]],
    *,
    id_key: str | None = None,
) -> dict[str, Any]:
    """One page of ``select`` (newest id first) as ``{"items": [...], "next_cursor": ...}``."""
    rows, cursor = fetch_page(conn, select, id_column, query, id_key=id_key)
    return {"items": [to_item(row) for row in rows], "next_cursor": cursor}
