"""Reading a workflow file's ``timezone:`` and ``schedule:`` sections."""

from __future__ import annotations

from typing import Any

from tickwork.shared.domain.schedule import parse_schedule, resolve_timezone
from tickwork.shared.dsl.loader import LineMap
from tickwork.shared.dsl.reporting import Reporter, Where
from tickwork.shared.errors import InvalidSchedule


def read_timezone(reporter: Reporter, data: LineMap, where: Where) -> str:
    """The workflow's time zone (``UTC`` when absent or refused)."""
    if "timezone" not in data:
        return "UTC"
    try:
        return resolve_timezone(data["timezone"])
    except InvalidSchedule as exc:
        reporter.report(where, data.line_of("timezone"), exc.message)
        return "UTC"


def read_schedule(
    reporter: Reporter, data: LineMap, where: Where, timezone: str
) -> dict[str, Any] | None:
    """The ``schedule:`` as its stored form, or None when absent or refused (reported at the
    line of the option at fault)."""
    if "schedule" not in data:
        return None
    raw = data["schedule"]
    if not isinstance(raw, LineMap):
        message = f"'schedule' must be a mapping such as {{daily>: 07:00:00}}, got {raw!r}"
        reporter.report(where, data.line_of("schedule"), message)
        return None
    try:
        return parse_schedule(raw, timezone).to_config()
    except InvalidSchedule as exc:
        line = raw.line_of(exc.key) if exc.key else data.line_of("schedule")
        reporter.report(where, line, exc.message)
        return None
