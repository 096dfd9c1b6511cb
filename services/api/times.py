"""Times in and out of the API: ISO 8601 with an offset out; in, a naive time is read in
a given zone (UTC, or the workflow's for a session time)."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from services.api.errors import ApiProblem, InvalidBody, InvalidParameter
from shared.domain.instants import out_of_range, shown_in

TIME_FORMAT_HINT = "expected an ISO 8601 time like 2026-11-30T07:00:00+09:00 or 2026-11-30"


def parse_time(
    raw: str,
    timezone: str = "UTC",
    *,
    pointer: str | None = None,
    parameter: str | None = None,
) -> datetime:
    """An aware time from ``raw``; a naive one is in ``timezone``.

    Errors name the body member (``pointer``) or the query parameter (``parameter``): for
    text that is not a time (whitespace around it included), and for a time outside the
    range every zone can show.
    """
    if raw != raw.strip():
        raise _bad("a time has no whitespace around it", pointer, parameter)
    try:
        parsed = datetime.fromisoformat(raw)
        if parsed.tzinfo is None:
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


def format_time(instant: datetime | None, timezone: str | None = None) -> str | None:
    """``instant`` as ISO 8601 with its offset, in ``timezone`` when given (else UTC, and
    in UTC too when that zone cannot show it)."""
    if instant is None:
        return None
    zone = ZoneInfo(timezone) if timezone else UTC
    return shown_in(instant, zone).isoformat()
