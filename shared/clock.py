"""Time for every loop: a real clock and a controllable one for tests, behind one Protocol."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """Where loops read the current time; always aware UTC."""

    def now(self) -> datetime: ...


class SystemClock:
    """The wall clock."""

    def now(self) -> datetime:
        """The current aware UTC time."""
        return datetime.now(UTC)


class ManualClock:
    """A clock that moves only when told to; for tests that drive ``tick(now)``."""

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("ManualClock needs an aware datetime")
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> datetime:
        """The time the clock was last set to."""
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> datetime:
        """Move the clock forward and return the new time."""
        with self._lock:
            self._now += timedelta(seconds=seconds)
            return self._now


def utc_now() -> datetime:
    """The current aware UTC time."""
    return datetime.now(UTC)
