"""Helix-style delays: when a task may start, from its ``_delay`` and ``_start_at``.

A task with either key may start at the later of two times: when it became ready plus
``_delay``, and ``_start_at``. ``_start_at`` is an instant (ISO 8601 with a UTC offset) or
a wall time ``HH:MM[:SS]``: that time on the session's date, both taken in the workflow's
time zone. The date is the session's even when the wall time is earlier than the session
time (``00:00`` of a ``06:00`` session is six hours before it, so it holds nothing back).
A wall time that does not exist (the spring-forward gap) means the first instant after the
gap, and one that happens twice (the autumn repeated hour) its first pass, as for
schedules (:mod:`tickwork.shared.domain.session_times`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from tickwork.shared.domain.session_times import gap_end, wall_instants
from tickwork.shared.errors import InvalidValue

_WALL_TIME = re.compile(r"\A(\d{1,2}):(\d{2})(?::(\d{2}))?\Z")
_EXPECTED = (
    "a time of day HH:MM[:SS] or a date and time with a UTC offset, "
    "such as 07:00 or 2026-12-01T07:00:00+09:00"
)


class BadStartAt(InvalidValue):
    """Raised for a ``_start_at`` value that is neither form; the message says what was
    expected."""


def parse_start_at(value: Any) -> str:
    """The stored form of a ``_start_at`` value: ``HH:MM:SS``, or an ISO 8601 instant.

    Raises :class:`BadStartAt` for anything else, including a date and time without a
    UTC offset (it would be ambiguous) and out-of-range clock fields.
    """
    if not isinstance(value, str):
        raise BadStartAt(f"must be {_EXPECTED}, got {value!r}")
    text = value.strip()
    wall = _WALL_TIME.fullmatch(text)
    if wall is not None:
        hour, minute, second = (int(part or 0) for part in wall.groups())
        if hour > 23 or minute > 59 or second > 59:
            raise BadStartAt(f"has an out-of-range time of day {value!r}")
        return time(hour, minute, second).isoformat()
    try:
        instant = datetime.fromisoformat(text)
    except ValueError:
        raise BadStartAt(f"must be {_EXPECTED}, got {value!r}") from None
    if instant.tzinfo is None:
        raise BadStartAt(
            f"needs a UTC offset such as +09:00 or Z (or a time of day HH:MM), got {value!r}"
        )
    return instant.isoformat()


def start_instant(start_at: str, session_time: datetime, zone: ZoneInfo) -> datetime:
    """The instant a stored ``_start_at`` means for a session (see the module docstring)."""
    wall = _WALL_TIME.fullmatch(start_at)
    if wall is None:
        return datetime.fromisoformat(start_at)
    local_date = session_time.astimezone(zone).date()
    local = datetime.combine(local_date, time.fromisoformat(start_at))
    instants, in_gap = wall_instants(local, zone)
    return gap_end(local, zone) if in_gap else instants[0]


@dataclass(frozen=True)
class StartRule:
    """A task's ``_delay`` in whole seconds and ``_start_at`` as :func:`parse_start_at` keeps it."""

    delay_seconds: int = 0
    start_at: str | None = None

    def not_before(self, ready_at: datetime, session_time: datetime, timezone: str) -> datetime:
        """When a task that became ready at ``ready_at`` may start: the later time wins."""
        delayed = ready_at + timedelta(seconds=self.delay_seconds)
        if self.start_at is None:
            return delayed
        return max(delayed, start_instant(self.start_at, session_time, ZoneInfo(timezone)))

    def to_config(self) -> dict[str, Any]:
        """The JSON form stored with a task."""
        config: dict[str, Any] = {}
        if self.delay_seconds:
            config["delay"] = self.delay_seconds
        if self.start_at is not None:
            config["at"] = self.start_at
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> StartRule:
        """Inverse of :meth:`to_config`."""
        return cls(delay_seconds=int(config.get("delay", 0)), start_at=config.get("at"))
