"""Times in and out of the API: ISO 8601 with an offset out; in, a naive time is read in
a given zone (UTC, or the workflow's for a session time)."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from services.api.errors import ApiProblem, InvalidBody, InvalidParameter
from shared.display import iso_time
from shared.domain.instants import out_of_range

TIME_FORMAT_HINT = "expected an ISO 8601 time like 2026-11-30T07:00:00+09:00 or 2026-11-30"


def parse_time(
    raw: str,
    timezone: str | None = "UTC",
    *,
    pointer: str | None = None,
    parameter: str | None = None,
) -> datetime:
    """An aware time from ``raw``; a naive one is in ``timezone`` (with None it stays
    naive, for the caller to read in a zone it learns later: a workflow's).

    Errors name the body member (``pointer``) or the query parameter (``parameter``): for
    text that is not a time (whitespace around it included), and for a time outside the
    range every zone can show.
    """
    if raw != raw.strip():
        raise _bad("a time has no whitespace around it", pointer, parameter)
    try:
        parsed = datetime.fromisoformat(raw)
        if parsed.tzinfo is None:
            if timezone is None:
                return parsed
            parsed = parsed.replace(tzinfo=_zone(timezone))
    except ValueError:
        raise _bad(f"{TIME_FORMAT_HINT}, got {raw[:60]!r}", pointer, parameter) from None
    if reason := out_of_range(parsed):
        raise _bad(reason, pointer, parameter)
    return parsed


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {name!r}") from None


def _bad(detail: str, pointer: str | None, parameter: str | None) -> ApiProblem:
    if parameter is not None:
        return InvalidParameter(parameter, detail)
    return InvalidBody(pointer or "", detail)


format_time = iso_time
"""``instant`` as ISO 8601 with its offset, in ``timezone`` when given (else UTC, and in
UTC too when that zone cannot show it): :func:`shared.display.iso_time`."""
