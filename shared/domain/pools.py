"""Pools and priority: how many tasks of a pool may be in flight, and in which order the
executor hands ready tasks out.

A pool is a name and a number of slots, shared by every project. A task with ``_pool:
NAME`` takes one of them from the moment it is queued until its run ends (a result, a
kill, a timeout); a task losing its agent keeps its slot for its next run. A task waiting
for a slot stays READY in the store: no agent holds it.

Ready tasks are handed out lowest *rank* first. A task's rank is the time it became
ready, in seconds, less :data:`PRIORITY_STEP_SECONDS` for each level of its ``_priority``:
a higher priority goes first, equal priorities go in the order they became ready, and a
task's rank never changes while it waits, so one of a low priority is handed out at the
latest once it has waited (difference in priority) x the step longer than a newer task of
a higher one: a steady load of high priorities cannot starve it (ageing).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from tickwork.shared.domain.workflow import QUEUE_NAME

POOL_NAME = QUEUE_NAME
"""What a pool may be called: as a queue (a letter or digit, then up to 63 of letters,
digits, ``_``, ``.``, ``-``)."""

MAX_SLOTS = 100_000
"""The most slots one pool may have."""

MIN_PRIORITY, MAX_PRIORITY = -100, 100
"""The range of ``_priority`` (0 when a task and its groups set none)."""

PRIORITY_STEP_SECONDS = 60.0
"""How much waiting one level of priority is worth: a task of priority N is handed out as
if it had become ready N minutes sooner."""

EPOCH = datetime(2020, 1, 1, tzinfo=UTC)
"""Ranks count seconds from here (small enough numbers for a float's precision)."""


def rank_seconds(now: datetime) -> float:
    """``now`` as a rank's time part: seconds since :data:`EPOCH`."""
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    return (now - EPOCH).total_seconds()


def ready_rank(now: datetime, priority: int) -> float:
    """The rank of a task of ``priority`` made READY at ``now`` (the store's statements
    compute the same in SQL)."""
    return rank_seconds(now) - priority * PRIORITY_STEP_SECONDS


def ready_since(rank: float, priority: int) -> datetime:
    """When a task of ``rank`` and ``priority`` became ready."""
    return EPOCH + timedelta(seconds=rank + priority * PRIORITY_STEP_SECONDS)


@dataclass(frozen=True)
class PoolUsage:
    """A pool as the store counts it: its slots, those in flight, and ready tasks waiting."""

    name: str
    slots: int | None  # None: tasks name it, but no pool of that name exists
    used: int
    waiting: int
    description: str | None = None

    @property
    def free(self) -> int:
        """Slots a task could take now (none while the pool does not exist)."""
        return max(0, (self.slots or 0) - self.used)
