"""The instants tickwork accepts: those every time zone can show.

A time zone's offset is less than a day, so an instant from 0001-01-02 to 9999-12-30
(UTC) has a wall-clock time in every zone; one nearer the ends of the calendar may fall
off it once shown in a workflow's zone (year 0 or 10000), which no list could render.
"""

from __future__ import annotations

from datetime import UTC, datetime, tzinfo

EARLIEST = datetime(1, 1, 2, tzinfo=UTC)
"""The earliest instant accepted (UTC)."""
LATEST = datetime(9999, 12, 30, 23, 59, 59, 999999, tzinfo=UTC)
"""The latest instant accepted (UTC)."""
RANGE_TEXT = "from 0001-01-02T00:00:00Z to 9999-12-30T23:59:59Z"


def out_of_range(instant: datetime) -> str | None:
    """Why ``instant`` (aware) is not accepted, or None if every zone can show it."""
    try:
        in_utc = instant.astimezone(UTC)
    except OverflowError:
        in_utc = None
    if in_utc is None or not EARLIEST <= in_utc <= LATEST:
        return f"out of range: a time must lie {RANGE_TEXT} so every time zone can show it"
    return None


def shown_in(instant: datetime, zone: tzinfo) -> datetime:
    """``instant`` in ``zone``; in UTC when that zone cannot show it (a time stored before
    the range was enforced), so a list holding it still renders."""
    try:
        return instant.astimezone(zone)
    except OverflowError:
        return instant.astimezone(UTC)
