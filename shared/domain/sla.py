"""A workflow's ``sla:``: when an attempt must be done by, and what happens when it is not.

``time: HH:MM[:SS]`` is a time of day in the workflow's time zone: the deadline is the
first instant at or after the attempt started at which the local clock reads that time
(later that day, or the next day). A time the clock skips (the spring-forward gap) means
the first instant after the gap; a time the clock reads twice (the autumn repeated hour)
means whichever pass comes first at or after the start. ``duration`` is a span from the
attempt's start, in real time.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from tickwork.shared.domain.session_times import gap_end, wall_instants
from tickwork.shared.domain.workflow import TaskSpec

SLA_TASK_NAME = "^sla"
"""The local name of the group of the ``sla:`` tasks, generated under the root task."""

SLA_FAIL_TASK_NAME = "^sla^fail"
"""The local name of the ``fail>`` task that ``fail: true`` adds under the root task."""

ALERT_KIND = "sla"
"""The ``alerts.kind`` of a missed SLA."""


@dataclass(frozen=True)
class SlaSpec:
    """One workflow's ``sla:``: exactly one of ``time`` (``HH:MM:SS``) and
    ``duration_seconds``; whether to record an alert and fail the attempt; and the
    ``+tasks`` to run (a group named :data:`SLA_TASK_NAME`), if any."""

    time: str | None = None
    duration_seconds: int | None = None
    alert: bool = True
    fail: bool = False
    tasks: TaskSpec | None = None

    def deadline(self, started_at: datetime, timezone: str) -> datetime:
        """When an attempt that started at ``started_at`` (aware) must be done by (UTC)."""
        if self.duration_seconds is not None:
            return started_at + timedelta(seconds=self.duration_seconds)
        assert self.time is not None
        return next_wall_time(time.fromisoformat(self.time), started_at, ZoneInfo(timezone))

    def describe(self) -> str:
        """The limit as the workflow wrote it, for messages (``time 02:00:00``)."""
        if self.time is not None:
            return f"time {self.time}"
        return f"duration {self.duration_seconds}s"

    def to_config(self) -> dict[str, Any]:
        """The JSON form stored with the workflow definition."""
        config: dict[str, Any] = {"alert": self.alert, "fail": self.fail}
        if self.time is not None:
            config["time"] = self.time
        if self.duration_seconds is not None:
            config["duration"] = self.duration_seconds
        if self.tasks is not None:
            config["tasks"] = self.tasks.to_config()
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> SlaSpec:
        """Inverse of :meth:`to_config`."""
        tasks = config.get("tasks")
        duration = config.get("duration")
        return cls(
            time=config.get("time"),
            duration_seconds=None if duration is None else int(duration),
            alert=bool(config.get("alert", True)),
            fail=bool(config.get("fail", False)),
            tasks=None if tasks is None else TaskSpec.from_config(tasks),
        )


def next_wall_time(wall: time, after: datetime, zone: ZoneInfo) -> datetime:
    """The first instant (UTC) at or after ``after`` at which ``zone``'s clock reads ``wall``."""
    start_date = after.astimezone(zone).date()
    for days in range(3):  # today's may have passed; tomorrow's cannot have
        for instant in _instants_on(start_date + timedelta(days=days), wall, zone):
            if instant >= after:
                return instant
    raise AssertionError("a time of day always comes again within two days")


def _instants_on(day: date, wall: time, zone: ZoneInfo) -> list[datetime]:
    local = datetime.combine(day, wall)
    instants, in_gap = wall_instants(local, zone)
    return [gap_end(local, zone)] if in_gap else instants
