"""What people type to start a session, read the same way by the CLI and the web UI:
session times (ISO 8601, a date, or Digdag's ``now``, ``hourly``, ``daily``, ``last``) and
params with dotted keys that nest (``a.b``).

Errors are :class:`BadEntry`, a ValueError whose message says what is wrong; each caller
names the option or the form field it came from.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from tickwork.shared.domain.instants import out_of_range

SESSION_KEYWORDS = ("now", "hourly", "daily", "last")


class BadEntry(ValueError):
    """Raised when a typed session time or param cannot be used; the message says why."""


TIME_HINT = "expected an ISO 8601 time like 2026-11-30T07:00:00+09:00 or 2026-11-30"


def read_time(raw: str, timezone: str | None) -> datetime:
    """ISO 8601, ``YYYY-MM-DD`` or ``YYYY-MM-DD HH:MM:SS``: aware, a naive one read in
    ``timezone`` (with None it stays naive, for a caller that learns the zone later).
    BadEntry for text that is not such a time (white space around it included), an
    unknown zone, or a time outside the range every zone can show."""
    try:
        parsed = datetime.fromisoformat(raw)
    except ValueError:
        raise BadEntry(f"{TIME_HINT}, got {raw[:60]!r}") from None
    if parsed.tzinfo is None:
        if timezone is None:
            return parsed
        try:
            parsed = parsed.replace(tzinfo=ZoneInfo(timezone))
        except (ZoneInfoNotFoundError, ValueError):
            raise BadEntry(f"unknown time zone {timezone!r}") from None
    if reason := out_of_range(parsed):
        raise BadEntry(reason)
    return parsed


def read_session_time(raw: str, timezone: str) -> datetime:
    """A time as a person types it (:func:`read_time`, white space around it ignored)."""
    return read_time(raw.strip(), timezone)


SESSION_KEYWORDS = ("now", "hourly", "daily", "last")
"""The words a session option takes besides a time, as Digdag's ``--session`` does."""


def session_time_named(
    raw: str, now: datetime, timezone: str, last: datetime | None = None
) -> datetime:
    """The session time ``raw`` names: ``now`` (to the second), ``hourly`` and ``daily``
    (``now`` cut to the hour or the day in ``timezone``), ``last`` (the workflow's latest
    session, ``last``), else a time read by :func:`read_session_time`."""
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
            raise BadEntry("'last' is the workflow's latest session, and it has none yet")
        return last
    return read_session_time(raw, timezone)


def key_path(key: str) -> list[str]:
    """A dotted param key as its path (``a.b`` -> ``["a", "b"]``); BadEntry for an empty
    key or an empty part."""
    path = [part.strip() for part in key.strip().split(".")]
    if not all(path):
        raise BadEntry(f"a key has an empty part: {key[:60]!r}")
    return path


def nested_params(
    entries: Iterable[tuple[str, Any]], into: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Params from ``(dotted key, value)`` pairs, later ones over earlier ones (and over
    ``into``, which is left as it is): ``a.b`` nests ``b`` under ``a``. BadEntry when a key
    nests under something that is already a value."""
    params: dict[str, Any] = _copy(into or {})
    for key, value in entries:
        path = key_path(key)
        target = params
        for part in path[:-1]:
            nested = target.setdefault(part, {})
            if not isinstance(nested, dict):
                raise BadEntry(f"{key!r} nests under {part!r}, which is already a value")
            target = nested
        target[path[-1]] = value
    return params


def _copy(params: dict[str, Any]) -> dict[str, Any]:
    return {k: _copy(v) if isinstance(v, dict) else v for k, v in params.items()}
