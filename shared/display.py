"""How tickwork shows values to people: times, durations, sizes. One formatter per concern,
used by the web UI's templates (as Jinja filters), the REST API's JSON and the CLI.

Pure functions of their arguments (no IO, no clock unless one is passed), so the CLI's
client commands can import them without the store.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from tickwork.shared.domain.instants import shown_in

SIZE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def zone_named(name: str | None) -> ZoneInfo | None:
    """The IANA zone ``name`` (None for none, or a name this machine does not know)."""
    if not name:
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return None


def as_instant(value: datetime | str) -> datetime:
    """A time given as a datetime or ISO 8601 text, aware (a naive one is UTC)."""
    moment = datetime.fromisoformat(value) if isinstance(value, str) else value
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def iso_time(instant: datetime | None, zone: str | tzinfo | None = None) -> str | None:
    """``instant`` as ISO 8601 with its offset, for machines (the REST API's JSON): in
    ``zone`` when given (else UTC, and in UTC too when that zone cannot show it)."""
    if instant is None:
        return None
    target = ZoneInfo(zone) if isinstance(zone, str) else (zone or UTC)
    return shown_in(instant, target).isoformat()


def time_text(instant: datetime, zone: str | tzinfo | None = None, *, sep: str = "T") -> str:
    """``instant`` for people: ISO 8601 to the second, in ``zone`` (else in the offset it
    carries), ``Z`` for UTC: ``2026-12-02T09:00:00+09:00``, ``2026-12-02T00:00:00Z``.
    ``sep`` goes between the date and the time (the UI uses a space)."""
    target = zone_named(zone) if isinstance(zone, str) else zone
    shown = shown_in(instant, target) if target is not None else instant
    text = shown.replace(microsecond=0).isoformat(sep=sep)
    if shown.utcoffset() == timedelta(0):
        text = text.removesuffix("+00:00") + "Z"
    return text


def utc_text(instant: datetime) -> str:
    """``instant`` in UTC to the second, ``...Z``: a ``<time>`` element's ``datetime``."""
    return time_text(instant.astimezone(UTC))


def duration_text(seconds: float | None) -> str:
    """A duration for people: ``0.4s``, ``12.3s``, ``3m 04s``, ``2h 05m``; ``-`` for none."""
    if seconds is None:
        return "-"
    seconds = max(0.0, float(seconds))
    if round(seconds, 1) < 60:
        return f"{seconds:.1f}s"
    whole = math.floor(seconds + 0.5)  # halves up, as the pages' scripts round
    if whole < 3600:
        return f"{whole // 60}m {whole % 60:02d}s"
    return f"{whole // 3600}h {whole % 3600 // 60:02d}m"


def elapsed_seconds(start: datetime | None, end: datetime | None) -> float | None:
    """Seconds from ``start`` to ``end`` (never negative); None unless both are known."""
    if start is None or end is None:
        return None
    return max(0.0, (end - start).total_seconds())


def running_for_text(start: datetime | str | float | None, now: datetime) -> str:
    """How long something that started at ``start`` has been running at ``now``
    (``3m 04s``); ``start`` may also be the seconds already elapsed. ``-`` for none."""
    if start is None or start == "":
        return "-"
    if isinstance(start, int | float):
        return duration_text(start)
    return duration_text(elapsed_seconds(as_instant(start), now))


def size_text(size_bytes: int | None) -> str:
    """A size in bytes for people: ``512 B``, ``1.5 KiB``, ``64.0 MiB``; ``-`` for none."""
    if size_bytes is None:
        return "-"
    size = float(size_bytes)
    for unit in SIZE_UNITS:
        if abs(size) < 1024 or unit == SIZE_UNITS[-1]:
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable: the last unit returns")
