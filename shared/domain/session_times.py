"""Session-time arithmetic on cron patterns and fixed intervals, with daylight-saving rules.

Croniter alone, given aware datetimes, fires a fixed-time job twice in a repeated hour and
adds runs around a change for stepped hours. tickwork walks the pattern in *wall* time and
maps each matching wall time to instants by these rules:

- A pattern that fires every hour (hour field ``*``, like ``0 * * * *`` or
  ``*/15 * * * *``) follows real time: it fires at every instant whose local wall time
  matches. Both passes of a repeated hour fire (an hourly job runs 25 times that day) and
  an hour the clock skips has nothing to fire (23 times that day), so runs stay evenly
  spaced in real time: no extra run, none missing.
- Any other pattern (``30 2 * * *``, ``0 */2 * * *``, ``*/15 1 * * *``) fires once per
  matching wall time: a wall time that does not exist (the spring-forward gap) fires at
  the first instant after the gap, once however many of its wall times fell in the gap,
  and one that happens twice (the autumn repeated hour) fires on the first pass only.

Every function takes and returns UTC instants, strictly ordered, never the same instant
twice. (Two aware datetimes sharing one zone compare by wall time, ignoring ``fold``: the
two passes of a repeated hour would look equal. UTC has no such trap.)
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Protocol
from zoneinfo import ZoneInfo

from croniter import CroniterBadDateError, croniter

# No zone shifts its clock by more than this; walls further apart than it keep their order.
MAX_SHIFT = timedelta(hours=3)
# Equal offsets at both ends of a step this short mean no change happened in between.
_SAFE_SPAN = timedelta(days=7)
_MAX_WALLS = 20_000
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# The latest wall time croniter can step from (it rounds microseconds up to a second).
_LAST_WALL = datetime(9999, 12, 31, 23, 59, 59)


class TimeSource(Protocol):
    """Anything that can step through session times."""

    def after(self, instant: datetime) -> datetime | None: ...

    def following(self, instant: datetime) -> Iterator[datetime]: ...

    def at_or_before(self, instant: datetime) -> datetime | None: ...


def follows_real_time(cron: str) -> bool:
    """True when the pattern fires in every hour (its hour field is ``*``)."""
    return cron.split()[1] in ("*", "*/1")


def wall_instants(wall: datetime, zone: ZoneInfo) -> tuple[list[datetime], bool]:
    """The instants (UTC) at which local ``wall`` time happens, and whether it is in a gap.

    One instant normally, two in a repeated hour (first pass first), none in a gap or
    outside years 1..9999 UTC.
    """
    try:
        first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
        second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    except OverflowError:
        return [], False
    if first == second:
        return [first], False
    if first < second:
        return [first, second], False
    return [], True


def gap_end(wall: datetime, zone: ZoneInfo) -> datetime:
    """The first instant after the daylight-saving gap that swallows ``wall``."""
    low = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)  # before the change
    high = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)  # after the change
    offset = low.astimezone(zone).utcoffset()
    while high - low > timedelta(seconds=1):
        middle = low + (high - low) / 2
        if middle.astimezone(zone).utcoffset() == offset:
            low = middle
        else:
            high = middle
    return high.replace(microsecond=0)


def _wall(instant: datetime, zone: ZoneInfo) -> datetime:
    """``instant``'s local wall time, within the range croniter can step from."""
    try:
        return min(instant.astimezone(zone).replace(tzinfo=None), _LAST_WALL)
    except OverflowError:  # the zone's wall clock is past year 9999 or before year 1
        return _LAST_WALL if instant.year > 1 else datetime.min


def _shift(wall: datetime, delta: timedelta) -> datetime:
    """``wall + delta``, clamped to the range croniter can step from."""
    try:
        return min(wall + delta, _LAST_WALL)
    except OverflowError:
        return _LAST_WALL if delta > timedelta(0) else datetime.min


@lru_cache(maxsize=4096)
def _parsed(cron: str) -> croniter:
    # Parsing a pattern costs as much as a step through it; each walk starts from a copy.
    return croniter(cron, datetime(2000, 1, 1))


def _croniter_at(cron: str, start: datetime) -> croniter:
    """A fresh croniter on ``cron`` at naive ``start``, as ``croniter(cron, start)`` but faster.

    The copy shares the parsed fields, which stepping only reads; the per-weekday sets it
    may update are copied too, so walks in several threads never touch the same set.
    """
    iterator = copy.copy(_parsed(cron))
    iterator.nth_weekday_of_month = {
        key: set(value) for key, value in iterator.nth_weekday_of_month.items()
    }
    iterator.set_current(start, force=True)
    return iterator


@lru_cache(maxsize=4096)
def _hourly_minutes(cron: str) -> tuple[int, ...] | None:
    """The minutes of every hour that ``cron`` fires in, when it fires in every hour of
    every day (all but its minute field ``*``); else None."""
    expanded = _parsed(cron).expanded
    if len(expanded) != 5 or any(field != ["*"] for field in expanded[1:]):
        return None
    return tuple(range(60)) if expanded[0] == ["*"] else tuple(sorted(expanded[0]))


def _hourly_walls(minutes: tuple[int, ...], start: datetime) -> Iterator[datetime]:
    """What croniter's walk forward from naive ``start`` finds for a pattern that fires at
    ``minutes`` of every hour, by arithmetic: at most _MAX_WALLS, none past _LAST_WALL."""
    hour = start.replace(minute=0, second=0, microsecond=0)
    found = 0
    while True:
        for minute in minutes:
            wall = hour.replace(minute=minute)
            if wall <= start:
                continue
            if found == _MAX_WALLS:
                return
            found += 1
            yield wall
        try:
            hour += timedelta(hours=1)
        except OverflowError:
            return


def _walls(cron: str, start: datetime, forward: bool) -> Iterator[datetime]:
    """Matching wall times strictly after (or before) naive ``start``, at most _MAX_WALLS."""
    minutes = _hourly_minutes(cron) if forward else None
    if minutes is not None:
        # Every hour alike (``* * * * *``, ``*/15 * * * *``): a step of croniter costs
        # a hundred times this arithmetic, and a catch-up takes thousands of steps.
        yield from _hourly_walls(minutes, start.replace(microsecond=0))
        return
    # Croniter rounds microseconds up to the next second, which overflows on 9999-12-31;
    # matches are whole minutes, so dropping them changes no answer going forward.
    iterator = _croniter_at(cron, start.replace(microsecond=0) if forward else start)
    step = iterator.get_next if forward else iterator.get_prev
    for _ in range(_MAX_WALLS):
        try:
            found: datetime = step(datetime)
        except (CroniterBadDateError, OverflowError, ValueError):
            return
        yield found


class CronTimes:
    """Session times of a five-field cron pattern in a time zone."""

    def __init__(self, cron: str, zone: ZoneInfo) -> None:
        self.cron = cron
        self.zone = zone
        self.real_time = follows_real_time(cron)

    def _fixed_instant(self, wall: datetime) -> datetime | None:
        """``wall``'s one instant under the fixed-time rules; None past year 9999."""
        instants, in_gap = wall_instants(wall, self.zone)
        if in_gap:
            return gap_end(wall, self.zone)
        return instants[0] if instants else None

    def after(self, instant: datetime) -> datetime | None:
        """The first session time strictly after ``instant``."""
        if self.real_time:
            return self._real_after(instant)
        for wall in _walls(self.cron, _wall(instant, self.zone), forward=True):
            found = self._fixed_instant(wall)
            if found is not None and found > instant:
                return found
        return None

    def following(self, instant: datetime) -> Iterator[datetime]:
        """The session times strictly after ``instant``, in order: what :meth:`after`
        gives applied again and again, each time the same, for a fraction of the cost.

        One croniter walk serves time after time while each time found is its wall's
        one instant: a fresh walk from that time would then step through the very walls
        this one steps through next. Anywhere else (a gap, a change of offset, the end
        of the walk) the next time comes from :meth:`after` and a new walk starts there.
        """
        current = instant
        while True:
            for found in self._walk(current):
                yield found
                current = found
            following = self.after(current)
            if following is None:
                return
            yield following
            current = following

    def _walk(self, instant: datetime) -> Iterator[datetime]:
        """The times after ``instant`` that one walk finds as :meth:`after` would, until
        a wall needs more than the walk (see :meth:`following`)."""
        current = instant
        for wall in _walls(self.cron, _wall(instant, self.zone), forward=True):
            if self.real_time:
                found = self._simple(wall, current)
                if found is None:
                    return  # near a change of offset: after() searches
            else:
                found = self._fixed_instant(wall)
                if found is None or found <= current:
                    continue  # as after() steps on
            yield found
            if _wall(found, self.zone) != wall:
                return  # a fresh walk from ``found`` starts at another wall
            current = found

    def at_or_before(self, instant: datetime) -> datetime | None:
        """The last session time at or before ``instant``."""
        if self.real_time:
            return self._real_at_or_before(instant)
        start = _shift(_wall(instant, self.zone), MAX_SHIFT)
        for wall in _walls(self.cron, start, forward=False):
            found = self._fixed_instant(wall)
            if found is not None and found <= instant:
                return found
        return None

    def _simple(self, wall: datetime, reference: datetime) -> datetime | None:
        """``wall``'s one instant when no offset change lies between it and ``reference``."""
        instants, in_gap = wall_instants(wall, self.zone)
        if in_gap or len(instants) != 1:
            return None
        found = instants[0]
        try:
            same_offset = (
                found.astimezone(self.zone).utcoffset()
                == reference.astimezone(self.zone).utcoffset()
            )
        except OverflowError:  # the reference's wall clock is past year 9999
            return None
        return found if same_offset and abs(found - reference) <= _SAFE_SPAN else None

    def _real_after(self, instant: datetime) -> datetime | None:
        for wall in _walls(self.cron, _wall(instant, self.zone), forward=True):
            simple = self._simple(wall, instant)
            if simple is not None:
                return simple
            break
        return self._search(instant, forward=True)

    def _real_at_or_before(self, instant: datetime) -> datetime | None:
        start = _shift(_wall(instant, self.zone), timedelta(microseconds=1))
        for wall in _walls(self.cron, start, forward=False):
            simple = self._simple(wall, instant)
            if simple is not None and simple <= instant:
                return simple
            break
        return self._search(instant, forward=False)

    def _search(self, instant: datetime, *, forward: bool) -> datetime | None:
        """Near an offset change: scan walls around ``instant`` and keep the nearest match."""
        shift = MAX_SHIFT if forward else -MAX_SHIFT
        best: datetime | None = None
        for wall in _walls(self.cron, _shift(_wall(instant, self.zone), -shift), forward):
            if best is not None and (
                wall > _shift(_wall(best, self.zone), MAX_SHIFT)
                if forward
                else wall < _shift(_wall(best, self.zone), -MAX_SHIFT)
            ):
                break
            for found in wall_instants(wall, self.zone)[0]:
                if (found > instant if forward else found <= instant) and (
                    best is None or (found < best if forward else found > best)
                ):
                    best = found
        return best


class IntervalTimes:
    """``@every``: instants ``offset + k * period`` after the Unix epoch (absolute time)."""

    def __init__(self, period_seconds: int, offset_seconds: int, zone: ZoneInfo) -> None:
        self.period = period_seconds
        self.offset = offset_seconds % period_seconds
        self.zone = zone

    def _instant(self, k: int) -> datetime | None:
        try:
            return EPOCH + timedelta(seconds=k * self.period + self.offset)
        except OverflowError:
            return None

    def index_at_or_before(self, instant: datetime) -> int:
        """k of the last tick at or before ``instant``."""
        elapsed = (instant - EPOCH) // timedelta(microseconds=1) - self.offset * 1_000_000
        return elapsed // (self.period * 1_000_000)

    def after(self, instant: datetime) -> datetime | None:
        """The first tick strictly after ``instant``."""
        return self._instant(self.index_at_or_before(instant) + 1)

    def following(self, instant: datetime) -> Iterator[datetime]:
        """The ticks strictly after ``instant``, in order, until past year 9999."""
        k = self.index_at_or_before(instant)
        while (found := self._instant(k := k + 1)) is not None:
            yield found

    def at_or_before(self, instant: datetime) -> datetime | None:
        """The last tick at or before ``instant``."""
        return self._instant(self.index_at_or_before(instant))

    def count_between(self, first: datetime, last: datetime) -> int:
        """How many ticks lie in ``[first, last]`` (both ticks)."""
        return self.index_at_or_before(last) - self.index_at_or_before(first) + 1
