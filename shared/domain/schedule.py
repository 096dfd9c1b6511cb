"""Schedule specs: a workflow's ``schedule:`` block, validated, and its session-time arithmetic.

Every form compiles to a five-field cron pattern of *session times* plus a delay, as in
Digdag: ``daily>: 07:00:00`` is ``0 0 * * *`` with a 7-hour delay, so the session time is
midnight and the run time 07:00. Times are computed in the schedule's own time zone.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from datetime import date, datetime, timedelta
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from croniter import CroniterBadDateError, CroniterError, croniter

from shared.errors import InvalidSchedule

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
OPTIONS = ("delay", "start", "end")
_CRON_TOKEN = re.compile(r"^(\*|\d+|\d*L|[A-Za-z]{3})$")
_UTC_OFFSET = re.compile(r"^([+-])(\d{2}):00$")
_FIELD_NAMES = "minute hour day-of-month month day-of-week"


@dataclass(frozen=True)
class ScheduleSpec:
    """A validated schedule: the form as written, its cron of session times, and its delay.

    ``kind`` is the form without ``>`` (``cron``, ``daily``, ``minutes_interval``, ...) and
    ``value`` its value as written; ``delay_seconds`` is run time minus session time.
    ``start`` and ``end`` are ``YYYY-MM-DD`` dates in ``timezone``, kept for the scheduler.
    """

    kind: str
    value: str
    timezone: str
    cron: str
    delay_seconds: int = 0
    start: str | None = None
    end: str | None = None

    @property
    def zone(self) -> ZoneInfo:
        """The schedule's time zone."""
        return ZoneInfo(self.timezone)

    def last_session_time(self, now: datetime) -> datetime:
        """The latest session time at or before ``now`` (aware, in the schedule's zone)."""
        local = _aware(now).astimezone(self.zone)
        found: datetime = croniter(self.cron, local + timedelta(microseconds=1)).get_prev(datetime)
        return found

    def next_session_time(self, now: datetime) -> datetime:
        """The earliest session time strictly after ``now`` (aware, in the schedule's zone)."""
        local = _aware(now).astimezone(self.zone)
        found: datetime = croniter(self.cron, local).get_next(datetime)
        return found

    def run_time(self, session_time: datetime) -> datetime:
        """When the session at ``session_time`` is due to start."""
        return session_time + timedelta(seconds=self.delay_seconds)

    def to_config(self) -> dict[str, Any]:
        """The JSON form stored with a workflow definition."""
        return {key: value for key, value in asdict(self).items() if value is not None}

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> ScheduleSpec:
        """Inverse of :meth:`to_config`."""
        return cls(
            kind=str(config["kind"]),
            value=str(config["value"]),
            timezone=str(config["timezone"]),
            cron=str(config["cron"]),
            delay_seconds=int(config.get("delay_seconds", 0)),
            start=config.get("start"),
            end=config.get("end"),
        )


def _aware(now: datetime) -> datetime:
    if now.tzinfo is None:
        raise TypeError("session times are computed from an aware datetime")
    return now


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
    cron, delay = _FORMS[kind](str(value).strip(), form)
    if "delay" in raw:
        if kind not in ("cron", "minutes_interval"):
            raise InvalidSchedule("'delay' is only valid with cron> or minutes_interval>", "delay")
        delay = _non_negative_int(raw["delay"], "delay")
    start = _date_option(raw, "start")
    end = _date_option(raw, "end")
    if start is not None and end is not None and end < start:
        raise InvalidSchedule(f"'end' ({end}) is before 'start' ({start})", "end")
    return ScheduleSpec(kind, str(value), zone_name, cron, delay, start, end)


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


def _non_negative_int(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidSchedule(f"'{key}' must be a whole number of seconds >= 0", key)
    return value


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
            aliases = ", ".join(CRON_ALIASES)
            raise InvalidSchedule(f"unknown cron alias '{value}' (use one of {aliases})", key)
        return CRON_ALIASES[value], 0
    fields = value.split()
    if len(fields) != 5:
        raise InvalidSchedule(
            f"cron '{value}' must have 5 fields ({_FIELD_NAMES}), got {len(fields)}", key
        )
    for field in fields:
        if not all(_CRON_TOKEN.match(token) for token in re.split(r"[,/#-]", field)):
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


def resolve_timezone(name: str) -> str:
    """The IANA name for ``name``; a whole-hour offset ``+09:00`` becomes ``Etc/GMT-9``.

    Raises :class:`InvalidSchedule` (key ``timezone``) for an unknown zone.
    """
    if not isinstance(name, str):
        raise InvalidSchedule(f"'timezone' must be a string, got {name!r}", "timezone")
    offset = _UTC_OFFSET.match(name)
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
