"""What several ``tickwork`` commands parse: session times, ``--param`` and
``--database-url`` options."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import click

from shared.domain.instants import out_of_range


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


DATABASE_OPTION = click.option(
    "--database-url",
    envvar="TICKWORK_DATABASE_URL",
    required=True,
    help="The store (env TICKWORK_DATABASE_URL).",
)

ADMIN_DATABASE_OPTION = click.option(
    "--database-url",
    envvar="TICKWORK_DATABASE_URL",
    help="Work on this store directly (env TICKWORK_DATABASE_URL); without it, ask the API.",
)
