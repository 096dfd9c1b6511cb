"""Helpers every ``tickwork`` subcommand shares: failing with one line, parsing times."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import NoReturn
from zoneinfo import ZoneInfo

import click

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
    try:
        parsed.astimezone(UTC)
    except OverflowError:
        raise click.BadParameter(f"{raw!r} is out of range", param_hint=param_hint) from None
    return parsed
