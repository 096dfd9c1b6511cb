"""How client commands print what the API answered: JSON lines, tables, fields, times.

Every time the CLI shows goes through :func:`format_time`: seconds precision, in the offset
it carries (a session time keeps its zone's offset), and ``Z`` for UTC.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

import click

from tickwork.shared.display import time_text


def print_json(value: Any) -> None:
    """One JSON document on one line."""
    click.echo(json.dumps(value, default=str))


def print_items(
    items: Iterable[dict[str, Any]],
    as_json: bool,
    columns: list[tuple[str, Callable[[dict[str, Any]], object]]],
) -> None:
    """A listing: JSON lines, or a table with one column per ``(title, cell)``."""
    if as_json:
        for item in items:
            print_json(item)
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(*(title for title, _ in columns))
    for item in items:
        table.add_row(*(text(cell(item)) for _, cell in columns))
    Console(width=None if sys.stdout.isatty() else 200).print(table)


def print_fields(item: dict[str, Any], as_json: bool, fields: list[str]) -> None:
    """One object: JSON, or ``name: value`` lines for the fields it has."""
    if as_json:
        print_json(item)
        return
    width = max(len(name) for name in fields)
    for name in fields:
        if name in item:
            click.echo(f"{name + ':':<{width + 1}} {text(item[name])}")


_ISO_TIME = re.compile(r"\A\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")


def format_time(value: datetime | str) -> str:
    """A time as the CLI shows it (:func:`tickwork.shared.display.time_text`): ISO 8601 to the
    second, in the offset it carries, with ``Z`` for UTC (``2026-12-02T09:00:00+09:00``,
    ``2026-12-02T00:00:00Z``). A string that is not an ISO 8601 time is returned as it is."""
    if isinstance(value, datetime):
        return time_text(value)
    if not _ISO_TIME.match(value):
        return value
    try:
        instant = datetime.fromisoformat(value)
    except ValueError:
        return value
    return time_text(instant)


def text(value: object) -> str:
    """A value as a table cell: ``-`` for nothing, JSON for structures, times by
    :func:`format_time`."""
    if value is None or value == "":
        return "-"
    if isinstance(value, dict | list):
        return json.dumps(value, default=str)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, datetime | str):
        return format_time(value)
    return str(value)


def field(name: str, *alternatives: str) -> Callable[[dict[str, Any]], object]:
    """A cell taken from ``item[name]``, else the first alternative present; ``a.b`` nests."""

    def cell(item: dict[str, Any]) -> object:
        for key in (name, *alternatives):
            value: Any = item
            for part in key.split("."):
                value = value.get(part) if isinstance(value, dict) else None
            if value is not None:
                return value
        return None

    return cell
