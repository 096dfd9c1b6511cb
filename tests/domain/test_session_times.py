"""Specification of session times: ordered, never doubled, croniter's away from DST changes.

The daylight-saving rules (shared/domain/session_times.py): a fixed-time pattern fires once
per wall time (a skipped wall time at the first instant after the gap, a repeated one on
the first pass); a pattern with a wildcard or step in the minute or hour field follows real
time (every instant whose wall clock matches: nothing extra, nothing missing).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime, time, timedelta
from functools import cache
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tickwork.shared.domain.schedule import ScheduleSpec, parse_schedule
from tickwork.shared.domain.session_times import CronTimes, follows_real_time
from tickwork.shared.errors import InvalidSchedule

NEW_YORK = ZoneInfo("America/New_York")
BERLIN = ZoneInfo("Europe/Berlin")
ZONES = (
    "UTC",
    "America/New_York",
    "Europe/Berlin",
    "Australia/Lord_Howe",  # a 30-minute daylight-saving shift
    "Asia/Tokyo",  # no daylight saving
    "America/Santiago",  # changes at midnight
)
HOUR = timedelta(hours=1)
MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")

# 2026's changes: New York springs forward on March 8 and falls back on November 1,
# Berlin on March 29 and October 25.
NY_SPRING, NY_AUTUMN, NY_NORMAL = date(2026, 3, 8), date(2026, 11, 1), date(2026, 3, 1)
BERLIN_SPRING, BERLIN_AUTUMN, BERLIN_NORMAL = (
    date(2026, 3, 29),
    date(2026, 10, 25),
    date(2026, 3, 1),
)


def cron(expression: str, zone: ZoneInfo | str) -> ScheduleSpec:
    return parse_schedule({"cron>": expression}, str(zone))


def local_day(day: date, zone: ZoneInfo) -> tuple[datetime, datetime]:
    """The first instant of ``day`` in ``zone`` and of the day after, in UTC."""
    start = datetime(day.year, day.month, day.day, tzinfo=zone)
    return start.astimezone(UTC), (start + timedelta(days=1)).astimezone(UTC)


def times_on(spec: ScheduleSpec, day: date) -> list[datetime]:
    """The session times on local ``day``."""
    first, after_last = local_day(day, spec.zone)
    found = spec.session_times(first - timedelta(microseconds=1), 200)
    return [t for t in found if t < after_last]


def offset_at(instant: datetime, zone: ZoneInfo) -> timedelta:
    offset = instant.astimezone(zone).utcoffset()
    assert offset is not None
    return offset


def in_repeated_hour(instant: datetime, zone: ZoneInfo) -> bool:
    """True when the wall clock shows the same time at another instant too."""
    local = instant.astimezone(zone)
    return local.replace(fold=1 - local.fold).astimezone(UTC) != instant


def walls(spec: ScheduleSpec, times: list[datetime]) -> list[str]:
    return [spec.local(t).strftime("%H:%M%z") for t in times]


def matching_instants(expression: str, zone: ZoneInfo, day: date) -> list[datetime]:
    """Every instant on local ``day`` whose wall clock shows a time ``expression`` matches.

    Independent of the rules under test: each matching wall time is tried at each of the
    day's UTC offsets and kept when the clock really shows it then.
    """
    first, after_last = local_day(day, zone)
    offsets = {offset_at(first, zone), offset_at(after_last, zone)}
    found: set[datetime] = set()
    iterator = croniter(expression, datetime.combine(day, time(0)) - timedelta(seconds=1))
    while (wall := iterator.get_next(datetime)).date() == day:
        for offset in offsets:
            instant = wall.replace(tzinfo=UTC) - offset
            if instant.astimezone(zone).replace(tzinfo=None) == wall:
                found.add(instant)
    return sorted(found)


ONE_MINUTE = timedelta(minutes=1)
CHANGE_DAYS = [
    (NEW_YORK, NY_SPRING),
    (NEW_YORK, NY_AUTUMN),
    (BERLIN, BERLIN_SPRING),
    (BERLIN, BERLIN_AUTUMN),
    (ZoneInfo("Australia/Lord_Howe"), date(2026, 4, 5)),
    (ZoneInfo("Australia/Lord_Howe"), date(2026, 10, 4)),
    (ZoneInfo("America/Santiago"), date(2026, 4, 4)),
    (ZoneInfo("America/Santiago"), date(2026, 9, 6)),
]


def first_reaching_instants(expression: str, zone: ZoneInfo, day: date) -> list[datetime]:
    """For each wall time on ``day`` that ``expression`` matches, the first instant at which
    the clock shows that time or later: the gap's end for a skipped time, the first pass of
    a repeated one. Found minute by minute, independent of the rules under test.
    """
    first, after_last = local_day(day, zone)
    instants = [first + timedelta(minutes=n) for n in range((after_last - first) // ONE_MINUTE)]
    shown = [i.astimezone(zone).replace(tzinfo=None) for i in instants]
    found: set[datetime] = set()
    iterator = croniter(expression, datetime.combine(day, time(0)) - timedelta(seconds=1))
    while (wall := iterator.get_next(datetime)).date() == day:
        reached = next((i for i, w in zip(instants, shown, strict=True) if w >= wall), None)
        if reached is not None:
            found.add(reached)
    return sorted(found)


def wall_matches(expression: str, instant: datetime, zone: ZoneInfo) -> bool:
    # Given an aware datetime croniter.match applies rules of its own around a change.
    return bool(croniter.match(expression, instant.astimezone(zone).replace(tzinfo=None)))


# --- generated cron patterns --------------------------------------------------------------


def _field(low: int, high: int, names: tuple[str, ...] = ()) -> st.SearchStrategy[str]:
    """One cron field over ``low..high``: a number, range, step or list, ``*``, or names."""
    number = st.integers(low, high)
    bounds = st.tuples(number, number).map(sorted)
    single = st.one_of(
        number.map(str),
        bounds.map(lambda b: f"{b[0]}-{b[1]}"),
        st.integers(1, (high - low + 1) // 2).map(lambda s: f"*/{s}"),
        st.tuples(bounds, st.integers(1, 6)).map(lambda t: f"{t[0][0]}-{t[0][1]}/{t[1]}"),
    )
    if names:
        single = st.one_of(single, st.sampled_from(names))
    listed = st.lists(single, min_size=1, max_size=3).map(",".join)
    return st.one_of(st.just("*"), listed)


MINUTE = _field(0, 59)
HOUR_FIELD = _field(0, 23)
DAY_OF_MONTH = st.one_of(
    _field(1, 28),
    st.sampled_from(["L", "1W", "15W", "31W", "1,L", "29", "30", "31"]),
)
MONTH = _field(1, 12, MONTHS)
DAY_OF_WEEK = st.one_of(
    _field(0, 6, DAYS),
    st.sampled_from(["MON-FRI", "SAT,SUN", "5#3", "MON#1", "0#5", "L5", "1#2,L5"]),
)
# Frequent patterns (wildcards in the minute and hour fields) cross the changes often.
FREQUENT = st.builds(
    lambda minute, hour: f"{minute} {hour} * * *",
    st.sampled_from(["*", "*/5", "*/15", "*/7", "0", "30", "0,30", "10-20", "45,59"]),
    # Fixed hours that hit the changes: 1-2 (New York, Berlin), 0 and 23 (Santiago).
    st.sampled_from(["*", "*/2", "*/3", "0-23/5", "1-3", "2", "1,2", "0", "23"]),
)
CRONS = st.one_of(
    FREQUENT,
    st.builds(
        lambda *fields: " ".join(fields), MINUTE, HOUR_FIELD, DAY_OF_MONTH, MONTH, DAY_OF_WEEK
    ),
)


@cache
def transitions(zone_name: str) -> tuple[datetime, ...]:
    """The instants (UTC) at which ``zone_name`` changes its offset, 2000 to 2040."""
    zone = ZoneInfo(zone_name)
    found: list[datetime] = []
    low = datetime(2000, 1, 1, tzinfo=UTC)
    while low < datetime(2041, 1, 1, tzinfo=UTC):
        high = low + timedelta(days=1)
        if low.astimezone(zone).utcoffset() != high.astimezone(zone).utcoffset():
            before, after = low, high
            while after - before > timedelta(minutes=1):
                middle = before + (after - before) / 2
                same = middle.astimezone(zone).utcoffset() == before.astimezone(zone).utcoffset()
                before, after = (middle, after) if same else (before, middle)
            found.append(after)
        low = high
    return tuple(found)


@st.composite
def starts(draw: st.DrawFn, zone_name: str, near_change: bool = False) -> datetime:
    """An instant in 2000..2040, often (or always) within hours of an offset change."""
    changes = transitions(zone_name)
    if changes and (near_change or draw(st.integers(0, 3)) > 0):
        change = draw(st.sampled_from(changes))
        # Dense patterns need a start just before the change to cross it within a few times.
        seconds = draw(st.one_of(st.integers(-6 * 3600, 3 * 3600), st.integers(-1800, 300)))
        return change + timedelta(seconds=seconds, microseconds=draw(st.sampled_from([0, 1])))
    return draw(st.datetimes(datetime(2000, 1, 1), datetime(2040, 12, 31), timezones=st.just(UTC)))


@st.composite
def schedules(
    draw: st.DrawFn, crons: st.SearchStrategy[str] = CRONS, zones: tuple[str, ...] = ZONES
) -> tuple[ScheduleSpec, datetime]:
    zone_name = draw(st.sampled_from(zones))
    expression = draw(crons)
    try:
        spec = cron(expression, zone_name)
    except InvalidSchedule as error:  # a date that never comes, such as "0 0 30 FEB *"
        assert "never fires" in error.message, error.message
        assume(False)
    return spec, draw(starts(zone_name, near_change=zones != ZONES))


# Patterns whose hours hit the changes, in zones that have them, starting near one.
AROUND_CHANGES = schedules(FREQUENT, tuple(z for z in ZONES if z not in ("UTC", "Asia/Tokyo")))


def croniter_times(spec: ScheduleSpec, start: datetime, count: int) -> Iterator[datetime]:
    iterator = croniter(spec.cron, start.astimezone(spec.zone))
    for _ in range(count):
        yield iterator.get_next(datetime).astimezone(UTC)


def change_between(zone: ZoneInfo, before: datetime, after: datetime) -> datetime:
    """The first instant with ``after``'s offset, when one change lies between the two."""
    while after - before > timedelta(seconds=1):
        middle = before + (after - before) / 2
        same = offset_at(middle, zone) == offset_at(before, zone)
        before, after = (middle, after) if same else (before, middle)
    return after.replace(microsecond=0)


def expected_between(spec: ScheduleSpec, earlier: datetime, later: datetime) -> list[datetime]:
    """What the rules fire strictly between two instants with one offset change between.

    Computed from the definition: every matching wall time is tried at both offsets; a
    real-time pattern fires at each instant whose clock shows it, a fixed-time pattern at
    the first of them, or at the end of the gap when the clock never shows it.
    """
    zone = spec.zone
    offsets = sorted({offset_at(earlier, zone), offset_at(later, zone)})
    first_wall = (earlier + offsets[0]).replace(tzinfo=None)
    last_wall = (later + offsets[-1]).replace(tzinfo=None)
    iterator = croniter(spec.cron, first_wall - timedelta(seconds=1))
    found: list[datetime] = []
    while (wall := iterator.get_next(datetime)) <= last_wall:
        candidates = [wall.replace(tzinfo=UTC) - offset for offset in offsets]
        shown = [t for t in candidates if t.astimezone(zone).replace(tzinfo=None) == wall]
        if follows_real_time(spec.cron):
            found.extend(shown)
        else:
            found.append(min(shown) if shown else change_between(zone, earlier, later))
    return sorted({t for t in found if earlier < t < later})


@pytest.mark.slow  # seconds of work: left out of make test-fast
class TestGeneratedPatterns:
    @settings(max_examples=100, deadline=None)
    @given(schedules())
    def test_session_times_strictly_increase_and_never_repeat_an_instant(
        self, generated: tuple[ScheduleSpec, datetime]
    ) -> None:
        spec, start = generated
        times = spec.session_times(start, 15)
        assert times, spec.cron
        assert times[0] > start
        assert all(earlier < later for earlier, later in pairwise(times))
        assert len({t.timestamp() for t in times}) == len(times)
        assert all(t.tzinfo is UTC for t in times)

    @settings(max_examples=100, deadline=None)
    @given(schedules())
    def test_away_from_offset_changes_session_times_are_croniters(
        self, generated: tuple[ScheduleSpec, datetime]
    ) -> None:
        spec, start = generated
        # In the second pass of a repeated hour croniter fires the wall times again.
        assume(not in_repeated_hour(start, spec.zone))
        offset = start.astimezone(spec.zone).utcoffset()
        steady = [start]
        for found in spec.session_times(start, 15):
            if found.astimezone(spec.zone).utcoffset() != offset:
                break  # from here on, a change lies behind: croniter's rules differ
            steady.append(found)
        expected = list(croniter_times(spec, start, len(steady) - 1))
        assert steady[1:] == expected

    @settings(max_examples=100, deadline=None)
    @given(schedules())
    def test_each_session_time_shows_a_matching_wall_time_or_ends_a_gap(
        self, generated: tuple[ScheduleSpec, datetime]
    ) -> None:
        spec, start = generated
        for found in spec.session_times(start, 15):
            just_before = found - timedelta(seconds=1)
            ends_gap = offset_at(found, spec.zone) != offset_at(just_before, spec.zone)
            assert wall_matches(spec.cron, found, spec.zone) or (
                ends_gap and not follows_real_time(spec.cron)
            ), spec.local(found)

    @settings(max_examples=200, deadline=None)
    @given(AROUND_CHANGES)
    def test_nothing_the_rules_fire_is_skipped_across_an_offset_change(
        self, generated: tuple[ScheduleSpec, datetime]
    ) -> None:
        spec, start = generated
        times = [start, *spec.session_times(start, 15)]
        for earlier, later in pairwise(times):
            if offset_at(earlier, spec.zone) != offset_at(later, spec.zone) and (
                later - earlier < timedelta(days=2)
            ):
                assert expected_between(spec, earlier, later) == [], (earlier, later)

    @settings(max_examples=100, deadline=None)
    @given(schedules())
    def test_the_last_session_time_is_the_one_before_the_next(
        self, generated: tuple[ScheduleSpec, datetime]
    ) -> None:
        spec, now = generated
        last = spec.last_session_time(now)
        following = spec.next_session_time(now)
        assert last is not None and following is not None
        assert last <= now < following
        assert spec.next_session_time(last) == following
        assert spec.last_session_time(following) == following


class TestFixedTimeAcrossDaylightSaving:
    @pytest.mark.parametrize(
        ("zone", "day", "expected"),
        [
            (NEW_YORK, NY_SPRING, ["03:00-0400"]),
            (NEW_YORK, NY_SPRING + timedelta(days=1), ["02:30-0400"]),
            (BERLIN, BERLIN_SPRING, ["03:00+0200"]),
            (BERLIN, BERLIN_SPRING + timedelta(days=1), ["02:30+0200"]),
        ],
    )
    def test_a_skipped_wall_time_fires_once_at_the_first_instant_after_the_gap(
        self, zone: ZoneInfo, day: date, expected: list[str]
    ) -> None:
        spec = cron("30 2 * * *", zone)
        assert walls(spec, times_on(spec, day)) == expected

    @pytest.mark.parametrize(
        ("zone", "expression", "day", "first_pass_utc"),
        [
            (NEW_YORK, "30 1 * * *", NY_AUTUMN, datetime(2026, 11, 1, 5, 30, tzinfo=UTC)),
            (BERLIN, "30 2 * * *", BERLIN_AUTUMN, datetime(2026, 10, 25, 0, 30, tzinfo=UTC)),
        ],
    )
    def test_a_repeated_wall_time_fires_once_on_the_first_pass(
        self, zone: ZoneInfo, expression: str, day: date, first_pass_utc: datetime
    ) -> None:
        spec = cron(expression, zone)
        assert times_on(spec, day) == [first_pass_utc]
        # Asked from inside the second pass, just before the wall time comes round again,
        # the next session is the next day's (the autumn day is 25 hours long).
        inside_second_pass = first_pass_utc + timedelta(minutes=59)
        assert spec.next_session_time(inside_second_pass) == first_pass_utc + timedelta(hours=25)

    @pytest.mark.parametrize(
        ("zone", "day", "expected"),
        [(NEW_YORK, NY_SPRING, ["03:00-0400"]), (BERLIN, BERLIN_SPRING, ["03:00+0200"])],
    )
    def test_two_wall_times_in_one_gap_fire_once(
        self, zone: ZoneInfo, day: date, expected: list[str]
    ) -> None:
        spec = cron("0,30 2 * * *", zone)
        assert walls(spec, times_on(spec, day)) == expected

    def test_last_session_time_agrees_with_the_gap_rule(self) -> None:
        spec = cron("30 2 * * *", NEW_YORK)
        gap_end = datetime(2026, 3, 8, 7, tzinfo=UTC)  # 03:00 EDT
        assert spec.last_session_time(gap_end) == gap_end
        assert spec.last_session_time(gap_end - timedelta(microseconds=1)) == datetime(
            2026, 3, 7, 7, 30, tzinfo=UTC
        )


class TestRealTimeAcrossDaylightSaving:
    @pytest.mark.parametrize(
        ("zone", "day", "runs"),
        [
            (NEW_YORK, NY_NORMAL, 24),
            (NEW_YORK, NY_SPRING, 23),
            (NEW_YORK, NY_AUTUMN, 25),
            (BERLIN, BERLIN_NORMAL, 24),
            (BERLIN, BERLIN_SPRING, 23),
            (BERLIN, BERLIN_AUTUMN, 25),
        ],
    )
    def test_hourly_runs_follow_real_time_one_hour_apart(
        self, zone: ZoneInfo, day: date, runs: int
    ) -> None:
        spec = cron("0 * * * *", zone)
        times = times_on(spec, day)
        assert len(times) == runs
        assert all(later - earlier == HOUR for earlier, later in pairwise(times))

    @pytest.mark.parametrize(
        ("zone", "day", "runs"),
        [
            (NEW_YORK, NY_NORMAL, 96),
            (NEW_YORK, NY_SPRING, 92),
            (NEW_YORK, NY_AUTUMN, 100),
            (BERLIN, BERLIN_SPRING, 92),
            (BERLIN, BERLIN_AUTUMN, 100),
        ],
    )
    def test_quarter_hour_runs_follow_real_time_fifteen_minutes_apart(
        self, zone: ZoneInfo, day: date, runs: int
    ) -> None:
        spec = cron("*/15 * * * *", zone)
        times = times_on(spec, day)
        assert len(times) == runs
        assert all(later - earlier == timedelta(minutes=15) for earlier, later in pairwise(times))

    def test_a_stepped_hour_has_no_extra_run_in_new_yorks_repeated_hour(self) -> None:
        # New York repeats 01:00-01:59, an odd hour: 02:00 happens once, and 01:00 never fires.
        spec = cron("0 */2 * * *", NEW_YORK)
        times = times_on(spec, NY_AUTUMN)
        assert walls(spec, times)[:3] == ["00:00-0400", "02:00-0500", "04:00-0500"]
        assert len(times) == 12

    def test_a_stepped_hour_fires_once_in_a_repeated_matching_hour(self) -> None:
        # Berlin repeats 02:00-02:59: the clock shows 02:00 twice, but every two hours
        # means once; the first pass fires.
        spec = cron("0 */2 * * *", BERLIN)
        times = times_on(spec, BERLIN_AUTUMN)
        assert walls(spec, times)[:3] == ["00:00+0200", "02:00+0200", "04:00+0100"]
        assert len(times) == 12

    def test_a_stepped_hour_skipped_by_spring_forward_fires_after_the_gap(self) -> None:
        spec = cron("0 */2 * * *", BERLIN)
        times = times_on(spec, BERLIN_SPRING)
        assert walls(spec, times)[:3] == ["00:00+0100", "03:00+0200", "04:00+0200"]
        assert len(times) == 12

    @pytest.mark.parametrize(
        "expression", ["0 * * * *", "*/15 * * * *", "*/20 * * * *", "7,41 * * * *"]
    )
    @pytest.mark.parametrize(("zone", "day"), CHANGE_DAYS)
    def test_an_every_hour_pattern_fires_at_each_instant_whose_clock_matches(
        self, expression: str, zone: ZoneInfo, day: date
    ) -> None:
        spec = cron(expression, zone)
        assert times_on(spec, day) == matching_instants(expression, zone, day)

    @pytest.mark.parametrize(
        "expression",
        ["0 */2 * * *", "*/20 1-3 * * *", "* 2 * * *", "30 2 * * *", "0,30 1,2 * * *"],
    )
    @pytest.mark.parametrize(("zone", "day"), CHANGE_DAYS)
    def test_other_patterns_fire_once_when_the_clock_first_reaches_each_matching_time(
        self, expression: str, zone: ZoneInfo, day: date
    ) -> None:
        spec = cron(expression, zone)
        assert times_on(spec, day) == first_reaching_instants(expression, zone, day)


class TestCronTimes:
    def test_only_a_pattern_firing_every_hour_follows_real_time(self) -> None:
        assert follows_real_time("*/15 * * * *")
        assert follows_real_time("0 * * * *")
        assert not follows_real_time("0 */2 * * *")
        assert not follows_real_time("*/15 1 * * *")
        assert not follows_real_time("30 2 * * *")
        assert not follows_real_time("0,30 1-3 * * *")
        assert not follows_real_time("0 0 */2 * *")

    def test_the_far_future_ends_quietly(self) -> None:
        times = CronTimes("0 23 * * *", NEW_YORK)
        last_day = datetime(9999, 12, 31, 5, tzinfo=UTC)
        assert times.after(last_day) is None
        assert times.at_or_before(datetime.max.replace(tzinfo=UTC)) == datetime(
            9999, 12, 31, 4, tzinfo=UTC
        )


class TestDelaysAndIntervalsAcrossDaylightSaving:
    @pytest.mark.parametrize(
        ("day", "session_wall", "run_wall"),
        [
            (NY_SPRING, "00:00-0500", "08:00-0400"),
            (NY_AUTUMN, "00:00-0400", "06:00-0500"),
        ],
    )
    def test_a_daily_run_time_is_the_session_time_plus_the_delay_in_real_time(
        self, day: date, session_wall: str, run_wall: str
    ) -> None:
        # Digdag's rule: the session time is local midnight, the run time 7 real hours later.
        spec = parse_schedule({"daily>": "07:00:00"}, "America/New_York")
        [session_time] = times_on(spec, day)
        run = spec.run_time(session_time)
        assert run - session_time == timedelta(hours=7)
        assert walls(spec, [session_time, run]) == [session_wall, run_wall]

    def test_a_cron_delay_is_added_in_real_time(self) -> None:
        spec = parse_schedule({"cron>": "30 1 * * *", "delay": "45m"}, "America/New_York")
        [session_time] = times_on(spec, NY_AUTUMN)
        assert walls(spec, [session_time, spec.run_time(session_time)]) == [
            "01:30-0400",
            "01:15-0500",
        ]

    @pytest.mark.parametrize(("day", "runs"), [(NY_SPRING, 23), (NY_AUTUMN, 25), (NY_NORMAL, 24)])
    def test_every_hour_is_one_real_hour_apart_through_a_change(self, day: date, runs: int) -> None:
        spec = parse_schedule({"cron>": "@every 1h"}, "America/New_York")
        times = times_on(spec, day)
        assert len(times) == runs
        assert all(later - earlier == HOUR for earlier, later in pairwise(times))

    def test_every_ninety_minutes_ignores_the_wall_clock(self) -> None:
        spec = parse_schedule({"cron>": "@every 90m", "offset": "5m"}, "Europe/Berlin")
        times = spec.session_times(datetime(2026, 10, 24, 20, tzinfo=UTC), 10)
        assert all(later - earlier == timedelta(minutes=90) for earlier, later in pairwise(times))
        assert all(t.timestamp() % 5400 == 300 for t in times)


def one_by_one(spec: ScheduleSpec, start: datetime, count: int) -> list[datetime]:
    """``count`` times after ``start`` by :meth:`ScheduleSpec.next_session_time`, each
    from the one before."""
    found: list[datetime] = []
    current: datetime | None = start
    while len(found) < count and (current := spec.next_session_time(current)) is not None:
        found.append(current)
    return found


class TestOneWalk:
    """``times_after`` steps through many times on one walk; each is next_session_time's."""

    @pytest.mark.slow
    @settings(max_examples=100, deadline=None)
    @given(st.one_of(schedules(), AROUND_CHANGES))
    def test_the_walk_gives_what_each_next_time_gives(
        self, generated: tuple[ScheduleSpec, datetime]
    ) -> None:
        spec, start = generated
        assert spec.session_times(start, 40) == one_by_one(spec, start, 40)

    @pytest.mark.parametrize("zone", ZONES)
    @pytest.mark.parametrize(
        "expression", ["* * * * *", "*/15 * * * *", "0 * * * *", "30 2 * * *", "*/20 1-3 * * *"]
    )
    def test_across_a_year_of_changes(self, expression: str, zone: str) -> None:
        spec = cron(expression, zone)
        start = datetime(2026, 1, 1, tzinfo=UTC)
        count = 2000 if expression.endswith("* * * *") else 400
        # Start just before each of the year's changes too.
        for begin in (
            start,
            *(change - HOUR for change in transitions(zone) if change.year == 2026),
        ):
            assert spec.session_times(begin, count) == one_by_one(spec, begin, count)

    def test_the_walk_ends_where_the_schedule_ends(self) -> None:
        spec = parse_schedule({"cron>": "0 * * * *", "end": "2026-03-08"}, "America/New_York")
        start = datetime(2026, 3, 7, 12, tzinfo=UTC)
        assert list(spec.times_after(start)) == one_by_one(spec, start, 100)
        assert len(list(spec.times_after(start))) < 100

    def test_a_pattern_alike_every_hour_takes_no_croniter_step_per_time(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        spec = cron("* * * * *", "Europe/Berlin")
        steps = 0
        step = croniter.get_next

        def counted(self: croniter, *args: object, **kwargs: object) -> object:
            nonlocal steps
            steps += 1
            return step(self, *args, **kwargs)

        monkeypatch.setattr(croniter, "get_next", counted)
        times = spec.session_times(datetime(2026, 3, 1, tzinfo=UTC), 4320)
        assert len(times) == 4320
        assert steps == 0
