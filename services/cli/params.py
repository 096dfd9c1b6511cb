"""What several ``tickwork`` commands parse: session times (with Digdag's ``--session``
keywords), ``--param`` and ``--database-url`` options."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

import click

from tickwork.shared.clock import utc_now
from tickwork.shared.domain.entries import (
    BadEntry,
    nested_params,
    read_session_time,
    session_time_named,
)

if TYPE_CHECKING:
    from tickwork.services.cli.api_client import ApiClient

SESSION_HELP = (
    'Session time: now, hourly, daily, last, YYYY-MM-DD, "YYYY-MM-DD HH:MM:SS" or ISO 8601 '
    "(default: now). hourly and daily are this hour and today in the workflow's zone; "
    "last is the workflow's latest session."
)


def parse_session_time(raw: str, timezone: str, param_hint: str = "'--session-time'") -> datetime:
    """ISO 8601, ``YYYY-MM-DD`` or ``YYYY-MM-DD HH:MM:SS``; naive times are in ``timezone``
    (:func:`tickwork.shared.domain.entries.read_session_time`, its errors naming the option)."""
    try:
        return read_session_time(raw, timezone)
    except BadEntry as error:
        raise click.BadParameter(str(error), param_hint=param_hint) from None


def session_time_of(
    raw: str, now: datetime, timezone: str, last: datetime | None = None
) -> datetime:
    """The session time ``--session raw`` names
    (:func:`tickwork.shared.domain.entries.session_time_named`, its errors naming ``--session``)."""
    try:
        return session_time_named(raw, now, timezone, last)
    except BadEntry as error:
        raise click.BadParameter(str(error), param_hint="'--session'") from None


def resolve_session_option(
    client: ApiClient, project: str, workflow: str, raw: str | None
) -> datetime | None:
    """The session time of ``start --session raw`` (None without the option: the API's
    now), read in the zone of the workflow's latest revision."""
    from tickwork.shared.domain.schedule import resolve_timezone

    if raw is None:
        return None
    found = client.get_project_workflow(project, workflow)
    last_session = found.get("last_session") or {}
    last = last_session.get("session_time")
    timezone = resolve_timezone(str(found.get("timezone") or "UTC"))
    return session_time_of(raw, utc_now(), timezone, datetime.fromisoformat(last) if last else None)


def parse_param(raw: str) -> tuple[str, str]:
    """``a.b=v`` -> ("a.b", "v"); raises BadParameter naming the option."""
    key, sep, value = raw.partition("=")
    if not sep:
        raise click.BadParameter(f"expected KEY=VALUE, got {raw!r}", param_hint="'--param'")
    return key, value


def build_params(raw_params: tuple[str, ...]) -> dict[str, Any]:
    """Session params from ``--param`` options; dotted keys make nested values."""
    try:
        return nested_params(parse_param(raw) for raw in raw_params)
    except BadEntry as error:
        raise click.BadParameter(str(error), param_hint="'--param'") from None


PARAM_OPTION = click.option(  # run, start and retry: one spelling of --param
    "-p",
    "--param",
    "raw_params",
    multiple=True,
    metavar="KEY=VALUE",
    help="A session parameter; repeatable; a.b=v sets a nested key.",
)
