"""PostgreSQL's bulk rows: many rows bound as one array per column and read with ``unnest``."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Select,
    Table,
    Text,
    bindparam,
    cast,
    column,
    func,
    literal,
    select,
)
from sqlalchemy.dialects import postgresql


def rows_select(rows: Sequence[Mapping[str, Any]], types: Mapping[str, Any]) -> Select[Any]:
    """PostgreSQL: ``rows`` as ``SELECT ... FROM unnest(array, ...)``, column ``c`` of ``types[c]``.

    A bulk statement reading from it binds one array per column whatever the number of
    rows, where a multi-row VALUES list binds (and makes the driver parse) one parameter
    per value. A column with the same value in every row is bound once, not as an array:
    the driver spends more time writing an array's elements than checking them.
    """
    first = rows[0]
    names = list(first)
    varying = [names[0]] + [n for n in names[1:] if any(row[n] != first[n] for row in rows)]
    arrays = [_array([row[name] for row in rows], types[name]) for name in varying]
    columns = [column(name, types[name]) for name in varying]
    source = func.unnest(*arrays).table_valued(*columns).render_derived()
    selected = [
        source.c[name] if name in varying else literal(first[name], types[name]).label(name)
        for name in names
    ]
    return select(*selected).select_from(source)


# What makes an element need quotes in PostgreSQL's array syntax (commas are counted).
_NEEDS_QUOTES = re.compile(r'[{}"\\\s]|(?:^|,)null(?:,|$)', re.IGNORECASE)


def _array(values: list[Any], item_type: Any) -> ColumnElement[Any]:
    """``values`` as one array parameter of ``item_type``.

    Whole numbers and plain words (ids, names, zones, UUIDs) are written into the array's
    text here, in one join, for the server to parse; psycopg would check and escape each
    element in Python. Anything else is handed to psycopg as a list.
    """
    array_type = postgresql.ARRAY(item_type)
    if all(type(value) is int for value in values):
        text = ",".join(map(str, values))
    elif all(type(value) is str and value for value in values):
        text = ",".join(values)
        if text.count(",") != len(values) - 1 or _NEEDS_QUOTES.search(text):
            return bindparam(None, values, type_=array_type)
    else:
        return bindparam(None, values, type_=array_type)
    return cast(bindparam(None, "{" + text + "}", type_=Text()), array_type)


def column_types(*tables: Table) -> dict[str, Any]:
    """Each column's type by name, for :func:`rows_select` (later tables win a shared name)."""
    return {col.name: col.type for table in tables for col in table.columns}
