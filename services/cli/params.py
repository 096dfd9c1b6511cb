"""What several ``tickwork`` commands parse: session times (with Digdag's ``--session``
keywords), ``--param`` and ``--database-url`` options."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path
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


def build_params(raw_params: tuple[str, ...], params_file: Path | None = None) -> dict[str, Any]:
    """Session params: those of ``--params-file`` (a YAML or JSON mapping), then the
    ``--param`` options over them; dotted keys make nested values."""
    base = read_params_file(params_file) if params_file is not None else {}
    try:
        return nested_params((parse_param(raw) for raw in raw_params), into=base)
    except BadEntry as error:
        raise click.BadParameter(str(error), param_hint="'--param'") from None


def read_params_file(path: Path) -> dict[str, Any]:
    """The mapping a YAML (or JSON) params file holds, read safely; BadParameter naming
    the option, and the file's line for a syntax error."""
    import yaml  # only for a params file: commands without one start faster

    hint = "'-P' / '--params-file'"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise click.BadParameter(f"cannot read {path}: {exc}", param_hint=hint) from None
    try:
        loaded = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise click.BadParameter(f"{where}: {exc.problem}", param_hint=hint) from None
    except yaml.YAMLError as exc:
        raise click.BadParameter(f"{path}: {exc}", param_hint=hint) from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict) or not all(isinstance(k, str) for k in loaded):
        raise click.BadParameter(f"{path} must hold a mapping of names to values", param_hint=hint)
    return loaded


PARAMS_FILE_OPTION = click.option(
    "-P",
    "--params-file",
    "params_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    metavar="FILE",
    help="Session params from a YAML or JSON file (-p values win over it).",
)


PARAM_OPTION = click.option(  # run, start and retry: one spelling of --param
    "-p",
    "--param",
    "raw_params",
    multiple=True,
    metavar="KEY=VALUE",
    help="A session parameter; repeatable; a.b=v sets a nested key.",
)


def parse_pools(raw: tuple[str, ...]) -> dict[str, int]:
    """``--pool NAME=SLOTS`` values as ``{name: slots}`` (BadParameter naming the one wrong)."""
    from tickwork.shared.domain.pools import MAX_SLOTS, POOL_NAME

    pools: dict[str, int] = {}
    for item in raw:
        name, sep, slots = item.partition("=")
        if not sep or not POOL_NAME.fullmatch(name):
            raise click.BadParameter(
                f"{item!r} is not NAME=SLOTS with a pool name (a letter or digit, then "
                "letters, digits, '_', '.' or '-'; up to 64)",
                param_hint="'--pool'",
            )
        if not re.fullmatch(r"[0-9]{1,6}", slots) or int(slots) > MAX_SLOTS:
            raise click.BadParameter(
                f"{item!r}: SLOTS must be a whole number from 0 to {MAX_SLOTS}",
                param_hint="'--pool'",
            )
        pools[name] = int(slots)
    return pools


POOL_OPTION = click.option(  # run and standalone: pools set in their store before they start
    "--pool",
    "raw_pools",
    multiple=True,
    metavar="NAME=SLOTS",
    help="Set pool NAME to SLOTS slots in the store first (as `tickwork pools set`); repeatable.",
)
