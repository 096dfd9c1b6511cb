"""Schedule specs: a workflow's ``schedule:`` block, validated, and its session-time arithmetic.

Every cron-like form compiles to a five-field cron pattern of *session times* plus a delay,
as in Digdag: ``daily>: 07:00:00`` is ``0 0 * * *`` with a 7-hour delay, so the session
time is midnight and the run time 07:00. ``cron>: "@every 1h30m"`` is a fixed rate instead:
instants a whole number of periods after the Unix epoch (plus ``offset``). Times are
computed in the schedule's own time zone with the daylight-saving rules of
:mod:`tickwork.shared.domain.session_times`. The spec also carries the scheduler's policies:
catch-up after downtime, overlap with running sessions, and jitter.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, fields
from datetime import UTC, date, datetime, time, timedelta
from functools import cached_property, lru_cache
from itertools import islice
from typing import Any, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from croniter import CroniterBadDateError, CroniterError, croniter

from tickwork.shared.domain.durations import BadDuration, parse_duration
from tickwork.shared.domain.instants import EARLIEST, LATEST
from tickwork.shared.domain.numbers import whole_number
from tickwork.shared.domain.schedule_policies import Catchup, Overlap
from tickwork.shared.domain.session_times import CronTimes, IntervalTimes, TimeSource
from tickwork.shared.errors import InvalidSchedule

CRON_ALIASES = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
FULL_WEEKDAYS = ("sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday")
OPTIONS = (
    "delay",
    "start",
    "end",
    "offset",
    "jitter",
    "catchup",
    "catchup_window",
    "max_catchup",
    "overlap",
    "max_active",
    "skip_delayed_by",
    "skip_on_overtime",
)
DEFAULT_CATCHUP_WINDOW = 86400
DEFAULT_MAX_ACTIVE = 16
MAX_ACTIVE_LIMIT = 10_000
MAX_CATCHUP_LIMIT = 1_000_000
_YEAR_SECONDS = 366 * 86400
_CRON_TOKEN = re.compile(r"\A(\*|\d+|\d*L|L\d|\d+W|LW|[A-Za-z]{3})\Z")
_UTC_OFFSET = re.compile(r"\A([+-])(\d{2}):00\Z")
_FIELD_NAMES = "minute hour day-of-month month day-of-week"
P = TypeVar("P", Catchup, Overlap)


@dataclass(frozen=True)
class ScheduleSpec:
    """A validated schedule: the form as written, its session times, delay and policies.

    ``kind`` is the form without ``>`` (``cron``, ``daily``, ``minutes_interval``, ...) and
    ``value`` its value as written; ``cron`` is the pattern of session times (empty for
    ``@every``, which uses ``interval_seconds`` and ``offset_seconds``); ``delay_seconds``
    is run time minus session time, before jitter. ``start`` and ``end`` are inclusive
    ``YYYY-MM-DD`` dates in ``timezone``.
    """

    kind: str
    value: str
    timezone: str
    cron: str
    delay_seconds: int = 0
    start: str | None = None
    end: str | None = None
    interval_seconds: int | None = None
    offset_seconds: int = 0
    jitter_seconds: int = 0
    catchup: Catchup = Catchup.ALL
    catchup_window_seconds: int | None = DEFAULT_CATCHUP_WINDOW
    max_catchup: int | None = None
    overlap: Overlap = Overlap.ALLOW
    max_active: int = DEFAULT_MAX_ACTIVE

    def __post_init__(self) -> None:
        # A stored config gives the policies as text: an unknown one is refused here, by
        # name, rather than read as some other policy.
        object.__setattr__(self, "catchup", _policy(Catchup, self.catchup, "catchup"))
        object.__setattr__(self, "overlap", _policy(Overlap, self.overlap, "overlap"))

    @property
    def zone(self) -> ZoneInfo:
        """The schedule's time zone."""
        return ZoneInfo(self.timezone)

    @cached_property
    def _times(self) -> TimeSource:
        if self.interval_seconds is not None:
            return IntervalTimes(self.interval_seconds, self.offset_seconds, self.zone)
        return CronTimes(self.cron, self.zone)

    @cached_property
    def _first_instant(self) -> datetime | None:
        if self.start is None:
            return None
        return _local_midnight(date.fromisoformat(self.start), self.zone)

    @cached_property
    def _after_end(self) -> datetime | None:
        if self.end is None:
            return None
        day = date.fromisoformat(self.end)
        return None if day == date.max else _local_midnight(day + timedelta(days=1), self.zone)

    def next_session_time(self, now: datetime) -> datetime | None:
        """The earliest session time strictly after ``now`` (UTC), or None after ``end``.

        The series ends at the last instant accepted (``instants.LATEST``): a schedule
        whose next time would fall past it has none, as after ``end``.
        """
        now = _aware(now)
        if self._first_instant is not None and now < self._first_instant:
            now = self._first_instant - timedelta(microseconds=1)
        found = _cached_after(self, now)
        if found is None or found > LATEST:
            return None
        if self._after_end is not None and found >= self._after_end:
            return None
        return found

    def last_session_time(self, now: datetime) -> datetime | None:
        """The latest session time at or before ``now`` (UTC), or None before ``start``
        (or before the first instant accepted, ``instants.EARLIEST``)."""
        now = min(_aware(now), LATEST)
        if self._after_end is not None and now >= self._after_end:
            now = self._after_end - timedelta(microseconds=1)
        found = self._times.at_or_before(now)
        if found is None or found < EARLIEST:
            return None
        if self._first_instant is not None and found < self._first_instant:
            return None
        return found

    def times_after(self, after: datetime) -> Iterator[datetime]:
        """The session times strictly after ``after`` (UTC), in order: those that
        :meth:`next_session_time` gives one after another, each step far cheaper."""
        now = _aware(after)
        if self._first_instant is not None and now < self._first_instant:
            now = self._first_instant - timedelta(microseconds=1)
        for found in self._times.following(now):
            if found > LATEST or (self._after_end is not None and found >= self._after_end):
                return
            yield found

    def session_times(self, after: datetime, count: int) -> list[datetime]:
        """Up to ``count`` session times strictly after ``after``, in order."""
        return list(islice(self.times_after(after), count)) if count > 0 else []

    def run_time(self, session_time: datetime, seed: str = "") -> datetime:
        """When the session at ``session_time`` is due to start: delay plus jitter.

        The jitter is a hash of ``seed`` (the schedule's identity) and the session time, so
        every scheduler replica computes the same run time. A run time that would fall past
        the last instant accepted (``instants.LATEST``) is that instant.
        """
        jitter = 0
        if self.jitter_seconds:
            key = f"{seed}|{session_time.astimezone(UTC).isoformat()}"
            digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
            jitter = int.from_bytes(digest, "big") % (self.jitter_seconds + 1)
        return _later(session_time, self.delay_seconds + jitter)

    def delayed(self, session_time: datetime) -> datetime:
        """``session_time`` plus the delay (no jitter), at most ``instants.LATEST``."""
        return _later(session_time, self.delay_seconds)

    def count_between(self, first: datetime, last: datetime, cap: int) -> int | None:
        """How many session times lie in ``[first, last]``; None when more than ``cap``.

        ``first`` must be a session time. An interval is counted exactly, whatever ``cap``.
        """
        if isinstance(self._times, IntervalTimes):
            return self._times.count_between(first, min(last, LATEST))
        if cap < 1:
            return None
        count = 1
        for following in self.times_after(first):
            if following > last:
                return count
            count += 1
            if count > cap:
                return None
        return count

    def local(self, instant: datetime) -> datetime:
        """``instant`` in the schedule's zone, for display (compare instants in UTC only)."""
        return instant.astimezone(self.zone)

    def describe(self) -> str:
        """The schedule as written, for listings: ``daily>: 07:00:00``."""
        return f"{self.kind}>: {self.value}"

    def raw(self) -> dict[str, Any]:
        """The ``schedule:`` mapping this spec was parsed from, every option included.

        The inverse of :func:`parse_schedule`: ``parse_schedule(spec.raw(), spec.timezone)``
        is ``spec`` again; parsed in another zone, it is the same schedule there.
        """
        raw: dict[str, Any] = {f"{self.kind}>": self.value}
        if self.kind in ("cron", "minutes_interval") and self.delay_seconds:
            raw["delay"] = self.delay_seconds
        if self.interval_seconds is not None and self.offset_seconds:
            raw["offset"] = self.offset_seconds
        raw.update({key: getattr(self, key) for key in ("start", "end") if getattr(self, key)})
        if self.jitter_seconds:
            raw["jitter"] = self.jitter_seconds
        if self.catchup is not Catchup.ALL:
            raw["catchup"] = self.catchup.value
        if self.catchup_window_seconds != DEFAULT_CATCHUP_WINDOW:
            window = self.catchup_window_seconds
            raw["catchup_window"] = "none" if window is None else window
        if self.max_catchup is not None:
            raw["max_catchup"] = self.max_catchup
        if self.overlap is not Overlap.ALLOW:
            raw["overlap"] = self.overlap.value
        if self.max_active != DEFAULT_MAX_ACTIVE:
            raw["max_active"] = self.max_active
        return raw

    def to_config(self) -> dict[str, Any]:
        """The JSON form stored with a workflow definition (defaults left out)."""
        defaults = {f.name: f.default for f in fields(self)}
        return {
            key: value
            for key, value in asdict(self).items()
            if key in ("kind", "value", "timezone", "cron") or value != defaults[key]
        }

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> ScheduleSpec:
        """Inverse of :meth:`to_config`."""
        return _spec_from_config(tuple(sorted(config.items(), key=lambda item: item[0])))


@lru_cache(maxsize=4096)
def _spec_from_config(items: tuple[tuple[str, Any], ...]) -> ScheduleSpec:
    known = {f.name for f in fields(ScheduleSpec)}
    return ScheduleSpec(**{key: value for key, value in items if key in known})


def _later(instant: datetime, seconds: int) -> datetime:
    """``instant`` plus ``seconds``, at most LATEST (compared before adding: a year's delay
    past 9999-12-30 would overflow datetime)."""
    wait = timedelta(seconds=seconds)
    return instant + wait if wait <= LATEST - instant else LATEST


@lru_cache(maxsize=65536)
def _cached_after(spec: ScheduleSpec, now: datetime) -> datetime | None:
    # Thousands of schedules share a handful of specs and fire at the same instants.
    return spec._times.after(now)


def _local_midnight(day: date, zone: ZoneInfo) -> datetime:
    """The first instant of ``day`` in ``zone`` (after the gap if midnight is skipped)."""
    try:
        return datetime.combine(day, time(0), tzinfo=zone).astimezone(UTC)
    except OverflowError:  # midnight of 0001-01-01 east of UTC is before year 1 UTC
        return datetime.min.replace(tzinfo=UTC)


def _aware(now: datetime) -> datetime:
    if now.tzinfo is None:
        raise TypeError("session times are computed from an aware datetime")
    return now.astimezone(UTC)


def parse_schedule(raw: Mapping[str, Any], timezone: str) -> ScheduleSpec:
    """Validate a ``schedule:`` mapping in ``timezone`` and compile it to a :class:`ScheduleSpec`.

    Raises :class:`InvalidSchedule` naming the offending key.
    """
    if not isinstance(raw, Mapping):
        raise InvalidSchedule("'schedule' must be a mapping such as {daily>: 07:00:00}", "")
    zone_name = resolve_timezone(timezone)
    form = _form_key(raw)
    kind = form[:-1]
    value = raw[form]
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise InvalidSchedule(f"'{form}' must be a string, got {value!r}", form)
    text = str(value).strip()
    interval = _every(text, form) if kind == "cron" and text.startswith("@every") else None
    cron, delay = ("", 0) if interval is not None else _FORMS[kind](text, form)
    if "delay" in raw:
        if kind not in ("cron", "minutes_interval"):
            raise InvalidSchedule("'delay' is only valid with cron> or minutes_interval>", "delay")
        delay = _duration(raw, "delay", maximum=_YEAR_SECONDS)
    if "offset" in raw and interval is None:
        raise InvalidSchedule("'offset' is only valid with cron>: \"@every ...\"", "offset")
    start = _date_option(raw, "start")
    end = _date_option(raw, "end")
    if start is not None and end is not None and end < start:
        raise InvalidSchedule(f"'end' ({end}) is before 'start' ({start})", "end")
    spec = ScheduleSpec(
        kind,
        str(value),
        zone_name,
        cron,
        delay,
        start,
        end,
        interval_seconds=interval,
        offset_seconds=_duration(raw, "offset", maximum=interval) if "offset" in raw else 0,
        jitter_seconds=_duration(raw, "jitter", maximum=86400) if "jitter" in raw else 0,
        **_policies(raw),
    )
    if spec.next_session_time(_first_instant_of(spec)) is None:
        raise InvalidSchedule(f"'{form}' never fires between 'start' and 'end'", "end")
    return spec


def _first_instant_of(spec: ScheduleSpec) -> datetime:
    if spec.start is not None:
        # next_session_time moves any earlier instant up to just before ``start``.
        return datetime.min.replace(tzinfo=UTC)
    return datetime(2000, 1, 1, tzinfo=UTC)


def _every(text: str, key: str) -> int:
    """The period of ``@every 1h30m`` in seconds."""
    period = text[len("@every") :].strip()
    if not period:
        raise InvalidSchedule(f"'{key}' needs a period after @every, such as @every 1h30m", key)
    try:
        return parse_duration(period, minimum=1, maximum=_YEAR_SECONDS)
    except BadDuration as exc:
        raise InvalidSchedule(f"'{key}' @every period {exc}", key) from None


def _duration(raw: Mapping[str, Any], key: str, *, maximum: int | None = None) -> int:
    try:
        return parse_duration(raw[key], maximum=maximum)
    except BadDuration as exc:
        raise InvalidSchedule(f"'{key}' {exc}", key) from None


def _policies(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The catch-up and overlap options, with Digdag's spellings accepted."""
    policies: dict[str, Any] = {}
    if "catchup" in raw:
        policies["catchup"] = _policy(Catchup, raw["catchup"], "catchup")
    for key in ("catchup_window", "skip_delayed_by"):
        if key in raw:
            window = raw[key]
            none = window is None or str(window).lower() in ("none", "unlimited")
            # Longer than a year is "none"; the bound keeps now - window a valid datetime.
            seconds = None if none else _duration(raw, key, maximum=_YEAR_SECONDS)
            policies["catchup_window_seconds"] = seconds
    if "max_catchup" in raw:
        policies["max_catchup"] = _count(raw, "max_catchup", 0, MAX_CATCHUP_LIMIT)
    if "overlap" in raw:
        policies["overlap"] = _policy(Overlap, raw["overlap"], "overlap")
    if raw.get("skip_on_overtime") is True:
        policies["overlap"] = Overlap.SKIP
    elif "skip_on_overtime" in raw and raw["skip_on_overtime"] is not False:
        raise InvalidSchedule("'skip_on_overtime' must be true or false", "skip_on_overtime")
    if "max_active" in raw:
        policies["max_active"] = _count(raw, "max_active", 1, MAX_ACTIVE_LIMIT)
    return policies


def _policy(kind: type[P], value: object, key: str) -> P:
    """``value`` as a policy of ``kind``; InvalidSchedule naming ``key`` when it is none."""
    if isinstance(value, kind):
        return value
    choices = tuple(policy.value for policy in kind)
    if not isinstance(value, str) or value not in choices:
        raise InvalidSchedule(f"'{key}' must be one of {' | '.join(choices)}, got {value!r}", key)
    return kind(value)


def _count(raw: Mapping[str, Any], key: str, low: int, high: int) -> int:
    value = whole_number(raw[key])
    if value is None or not low <= value <= high:
        raise InvalidSchedule(f"'{key}' must be a whole number from {low} to {high}", key)
    return value


def _form_key(raw: Mapping[str, Any]) -> str:
    forms = [key for key in raw if str(key).endswith(">")]
    for key in raw:
        if key not in forms and key not in OPTIONS:
            raise InvalidSchedule(
                f"unknown schedule option '{key}'{suggest(str(key), OPTIONS)}", str(key)
            )
    if not forms:
        names = ", ".join(f"{kind}>" for kind in _FORMS)
        raise InvalidSchedule(f"'schedule' needs one of {names}", "")
    for key in forms:
        if key[:-1] not in _FORMS:
            known = [f"{kind}>" for kind in _FORMS]
            raise InvalidSchedule(f"unknown schedule '{key}'{suggest(key, known)}", key)
    if len(forms) > 1:
        raise InvalidSchedule(f"'schedule' has two forms: '{forms[0]}' and '{forms[1]}'", forms[1])
    return str(forms[0])


def suggest(word: str, candidates: Any) -> str:
    """`` (did you mean 'x'?)`` for the closest candidate, or an empty string."""
    close = difflib.get_close_matches(word, list(candidates), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _date_option(raw: Mapping[str, Any], key: str) -> str | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, date):
        return value.isoformat()[:10]
    text = str(value)
    try:
        if len(text) == 10:
            return date.fromisoformat(text).isoformat()
    except ValueError:
        pass
    raise InvalidSchedule(f"'{key}' must be a date YYYY-MM-DD, got {value!r}", key)


def _cron_form(value: str, key: str) -> tuple[str, int]:
    if value.startswith("@"):
        if value not in CRON_ALIASES:
            aliases = ", ".join([*CRON_ALIASES, "@every <period>"])
            raise InvalidSchedule(f"unknown cron alias '{value}' (use one of {aliases})", key)
        return CRON_ALIASES[value], 0
    fields = value.split()
    if len(fields) != 5:
        raise InvalidSchedule(
            f"cron '{value}' must have 5 fields ({_FIELD_NAMES}), got {len(fields)}", key
        )
    for field in fields:
        if not all(_CRON_TOKEN.fullmatch(token) for token in re.split(r"[,/#-]", field)):
            raise InvalidSchedule(f"cron '{value}' has an invalid field '{field}'", key)
    _check_cron(value, key)
    return " ".join(fields), 0


def _check_cron(expression: str, key: str) -> None:
    try:
        croniter(expression, datetime(2000, 1, 1)).get_next(datetime)
    except CroniterBadDateError:
        raise InvalidSchedule(f"cron '{expression}' never fires", key) from None
    except (CroniterError, ValueError, KeyError) as exc:
        raise InvalidSchedule(f"invalid cron '{expression}': {exc}", key) from None


def _clock_seconds(text: str, units: tuple[int, ...], key: str, example: str) -> int:
    """Seconds in ``HH:MM:SS`` (or ``MM:SS``), each field below its unit's limit."""
    parts = text.split(":")
    limits = {3600: 24, 60: 60, 1: 60}
    if len(parts) != len(units) or not all(p.isdigit() and len(p) <= 2 for p in parts):
        raise InvalidSchedule(f"'{key}' must look like {example}, got '{text}'", key)
    numbers = [int(p) for p in parts]
    if any(n >= limits[unit] for n, unit in zip(numbers, units, strict=True)):
        raise InvalidSchedule(f"'{key}' has an out-of-range time '{text}'", key)
    return sum(n * unit for n, unit in zip(numbers, units, strict=True))


def _hourly_form(value: str, key: str) -> tuple[str, int]:
    return "0 * * * *", _clock_seconds(value, (60, 1), key, "MM:SS")


def _daily_form(value: str, key: str) -> tuple[str, int]:
    return "0 0 * * *", _clock_seconds(value, (3600, 60, 1), key, "HH:MM:SS")


def _weekly_form(value: str, key: str) -> tuple[str, int]:
    day, _, clock = value.partition(",")
    name = day.strip().lower()
    if name.isdigit() and int(name) <= 7:
        weekday = int(name) % 7
    elif name in WEEKDAYS or name in FULL_WEEKDAYS:
        weekday = WEEKDAYS.index(name[:3])
    else:
        raise InvalidSchedule(f"'{key}' needs a weekday Sun..Sat, got '{day}'", key)
    delay = _clock_seconds(clock.strip(), (3600, 60, 1), key, "Sun,HH:MM:SS")
    return f"0 0 * * {weekday}", delay


def _monthly_form(value: str, key: str) -> tuple[str, int]:
    day, _, clock = value.partition(",")
    if not day.strip().isdigit() or not 1 <= int(day) <= 31:
        raise InvalidSchedule(f"'{key}' needs a day of the month 1..31, got '{day}'", key)
    delay = _clock_seconds(clock.strip(), (3600, 60, 1), key, "1,HH:MM:SS")
    return f"0 0 {int(day)} * *", delay


def _minutes_interval_form(value: str, key: str) -> tuple[str, int]:
    if not value.isdigit() or not 1 <= int(value) <= 59:
        raise InvalidSchedule(
            f"'{key}' must be a number of minutes 1..59 (use hourly> for longer), got '{value}'",
            key,
        )
    return f"*/{int(value)} * * * *", 0


_FORMS: dict[str, Callable[[str, str], tuple[str, int]]] = {
    "cron": _cron_form,
    "hourly": _hourly_form,
    "daily": _daily_form,
    "weekly": _weekly_form,
    "monthly": _monthly_form,
    "minutes_interval": _minutes_interval_form,
}


@lru_cache(maxsize=1)
def _zone_names() -> frozenset[str]:
    return frozenset(available_timezones())


_ETC_OFFSET = re.compile(r"\AEtc/GMT([+-])(\d{1,2})\Z")


def written_timezone(name: str) -> str:
    """A zone as a workflow file writes it, for display: :func:`resolve_timezone` stores the
    offset ``+09:00`` as ``Etc/GMT-9`` (the zone computed with), shown here as ``+09:00``
    again; any other name is returned as it is."""
    offset = _ETC_OFFSET.fullmatch(name)
    if offset is None:
        return name
    # POSIX-style Etc zones invert the sign: Etc/GMT-9 is UTC+9.
    return f"{'+' if offset.group(1) == '-' else '-'}{int(offset.group(2)):02d}:00"


def resolve_timezone(name: str) -> str:
    """The IANA name for ``name``; a whole-hour offset ``+09:00`` becomes ``Etc/GMT-9``.

    Raises :class:`InvalidSchedule` (key ``timezone``) for an unknown zone.
    """
    if not isinstance(name, str):
        raise InvalidSchedule(f"'timezone' must be a string, got {name!r}", "timezone")
    offset = _UTC_OFFSET.fullmatch(name)
    if offset is not None and int(offset.group(2)) <= 14:
        hours = int(offset.group(2))
        # POSIX-style Etc zones invert the sign: UTC+9 is Etc/GMT-9.
        return "UTC" if hours == 0 else f"Etc/GMT{'-' if offset.group(1) == '+' else '+'}{hours}"
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidSchedule(
            f"unknown timezone '{name}'{suggest(name, _zone_names())}", "timezone"
        ) from None
    return name
