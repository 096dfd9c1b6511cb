"""Times in and out of the API: ISO 8601 with an offset out; in, a naive time is read in
a given zone (UTC, or the workflow's for a session time)."""

from __future__ import annotations

from datetime import datetime

from tickwork.services.api.errors import ApiProblem, InvalidBody, InvalidParameter
from tickwork.shared.display import iso_time
from tickwork.shared.domain.entries import BadEntry, read_time


def parse_time(
    raw: str,
    timezone: str | None = "UTC",
    *,
    pointer: str | None = None,
    parameter: str | None = None,
) -> datetime:
    """An aware time from ``raw``; a naive one is in ``timezone`` (with None it stays
    naive, for the caller to read in a zone it learns later: a workflow's).

    :func:`tickwork.shared.domain.entries.read_time`, its errors naming the body member
    (``pointer``) or the query parameter (``parameter``): for text that is not a time
    (whitespace around it included), and for a time outside the range every zone can show.
    """
    if raw != raw.strip():
        raise _bad("a time has no whitespace around it", pointer, parameter)
    try:
        return read_time(raw, timezone)
    except BadEntry as error:
        raise _bad(str(error), pointer, parameter) from None


def _bad(detail: str, pointer: str | None, parameter: str | None) -> ApiProblem:
    if parameter is not None:
        return InvalidParameter(parameter, detail)
    return InvalidBody(pointer or "", detail)


format_time = iso_time
"""``instant`` as ISO 8601 with its offset, in ``timezone`` when given (else UTC, and in
UTC too when that zone cannot show it): :func:`tickwork.shared.display.iso_time`."""
