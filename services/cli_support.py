"""Helpers every ``tickwork`` subcommand shares: failing with one line, parsing times
and ``--param`` options."""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Any, NoReturn
from zoneinfo import ZoneInfo

import click

from shared.domain.instants import out_of_range

EXIT_INVALID = 2


def fail(message: str) -> NoReturn:
    """Print ``message`` on stderr and exit with the status of invalid input."""
    click.echo(message, err=True)
    sys.exit(EXIT_INVALID)


def parse_session_time(raw: str, timezone: str, param_hint: str = "'--session-time'") -> datetime:
    """ISO 8601, ``YYYY-MM-DD`` or ``YYYY-MM-DD HH:MM:SS``; naive times are in ``timezone``."""
    try:
        parsed = datetime.fromisoformat(raw.strip())
    except ValueError:
        raise click.BadParameter(
            f"expected a time like 2026-01-30 or 2026-01-30T07:00:00+09:00, got {raw!r}",
            param_hint=param_hint,
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=ZoneInfo(timezone))
    if reason := out_of_range(parsed):
        raise click.BadParameter(f"{raw!r} is {reason}", param_hint=param_hint)
    return parsed


def parse_param(raw: str) -> tuple[list[str], str]:
    """``a.b=v`` -> (["a", "b"], "v"); raises BadParameter naming the option."""
    key, sep, value = raw.partition("=")
    path = key.strip().split(".")
    if not sep or not all(part.strip() for part in path):
        raise click.BadParameter(f"expected KEY=VALUE, got {raw!r}", param_hint="'--param'")
    return path, value


def build_params(raw_params: tuple[str, ...]) -> dict[str, Any]:
    """Session params from ``--param`` options; dotted keys make nested values."""
    params: dict[str, Any] = {}
    for raw in raw_params:
        path, value = parse_param(raw)
        target = params
        for part in path[:-1]:
            nested = target.setdefault(part, {})
            if not isinstance(nested, dict):
                raise click.BadParameter(
                    f"{raw!r} nests under {part!r}, which is already a value",
                    param_hint="'--param'",
                )
            target = nested
        target[path[-1]] = value
    return params


def printable_url(url: str) -> str:
    """A database or Redis URL as it may be printed: its password, if any, masked."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except ValueError:  # not a URL SQLAlchemy can parse: say nothing of it
        return "<unparsable URL>"
