"""What several ``tickwork`` commands parse: session times (with Digdag's ``--session``
keywords), ``--param`` and ``--database-url`` options."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

import click

from shared.clock import utc_now
from shared.domain.instants import out_of_range

if TYPE_CHECKING:
    from services.cli.api_client import ApiClient

SESSION_HELP = (
    'Session time: now, hourly, daily, last, YYYY-MM-DD, "YYYY-MM-DD HH:MM:SS" or ISO 8601 '
    "(default: now). hourly and daily are this hour and today in the workflow's zone; "
    "last is the workflow's latest session."
)


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


def session_time_of(
    raw: str, now: datetime, timezone: str, last: datetime | None = None
) -> datetime:
    """The session time ``--session raw`` names: ``now`` (to the second), ``hourly`` and
    ``daily`` (``now`` cut to the hour or the day in ``timezone``), ``last`` (the
    workflow's latest session, ``last``), else a time read by :func:`parse_session_time`."""
    keyword = raw.strip().lower()
    local_now = now.astimezone(ZoneInfo(timezone)).replace(microsecond=0)
    if keyword == "now":
        return local_now
    if keyword == "hourly":
        return local_now.replace(minute=0, second=0)
    if keyword == "daily":
        return local_now.replace(hour=0, minute=0, second=0)
    if keyword == "last":
        if last is None:
            raise click.BadParameter(
                "'last' is the workflow's latest session, and it has none yet",
                param_hint="'--session'",
            )
        return last
    return parse_session_time(raw, timezone, "'--session'")


def resolve_session_option(
    client: ApiClient, project: str, workflow: str, raw: str | None
) -> datetime | None:
    """The session time of ``start --session raw`` (None without the option: the API's
    now), read in the zone of the workflow's latest revision."""
    from shared.domain.schedule import resolve_timezone

    if raw is None:
        return None
    found = client.get_project_workflow(project, workflow)
    last_session = found.get("last_session") or {}
    last = last_session.get("session_time")
    timezone = resolve_timezone(str(found.get("timezone") or "UTC"))
    return session_time_of(raw, utc_now(), timezone, datetime.fromisoformat(last) if last else None)


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
