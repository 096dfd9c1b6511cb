"""A safe subset of Moment.js for ``${...}``: parse, add, subtract, start/end of, format.

A :class:`Moment` is an instant shown in a time zone. ``moment(session_time)`` keeps the
session's wall time: when the workflow's ``timezone`` has the offset written in the text
at that instant, the moment lives in that zone (so adding days across a DST change keeps
the wall-clock time, as Moment.js does with a zone); otherwise in the fixed offset given.
Calendar units (years, quarters, months, weeks, days) move the wall-clock date and clamp
the day at month ends (Jan 31 + 1 month = Feb 28/29); time units move the instant.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, tzinfo
from datetime import timezone as fixed_zone
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from tickwork.shared.domain.jsvalues import is_number, to_text
from tickwork.shared.errors import InvalidExpression

_UNITS = {
    "year": ("y", "years", "year"),
    "quarter": ("Q", "quarters", "quarter"),
    "month": ("M", "months", "month"),
    "week": ("w", "weeks", "week"),
    "isoWeek": ("isoWeek", "isoWeeks"),
    "day": ("d", "days", "day", "date", "dates"),
    "hour": ("h", "hours", "hour"),
    "minute": ("m", "minutes", "minute"),
    "second": ("s", "seconds", "second"),
    "millisecond": ("ms", "milliseconds", "millisecond"),
}
_UNIT_OF = {alias: unit for unit, aliases in _UNITS.items() for alias in aliases}
_TIME_UNITS = {"hour": 3600.0, "minute": 60.0, "second": 1.0, "millisecond": 0.001}
_MONTHS_IN = {"year": 12, "quarter": 3, "month": 1}
_DAYS_IN = {"week": 7, "isoWeek": 7, "day": 1}
_TOKEN = re.compile(
    r"\[[^\]]*\]|YYYY|YY|Q|MMMM|MMM|MM|Mo|M|DDDD|DDD|DD|Do|D|dddd|ddd|dd|d|E|HH|H|hh|h|kk|k"
    r"|mm|m|ss|s|SSS|SS|S|A|a|ZZ|Z|X|x|T|[A-Za-z]"
)
_PARSE_TOKEN = re.compile(r"\[[^\]]*\]|YYYY|MM|DD|HH|mm|ss|SSS|[A-Za-z]+")
_PARSE_FIELDS = {
    "YYYY": ("year", r"\d{4}"),
    "MM": ("month", r"\d{2}"),
    "DD": ("day", r"\d{2}"),
    "HH": ("hour", r"\d{2}"),
    "mm": ("minute", r"\d{2}"),
    "ss": ("second", r"\d{2}"),
    "SSS": ("millisecond", r"\d{3}"),
}
ISO_FORMAT = "YYYY-MM-DDTHH:mm:ssZ"
MAX_YEAR_STEP = 10_000


def _zone(name: Any) -> ZoneInfo:
    try:
        return ZoneInfo(str(name))
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidExpression(f"moment: unknown time zone {to_text(name)!r}") from None


def _offset_text(offset: timedelta | None, colon: bool) -> str:
    minutes = int((offset or timedelta()).total_seconds() // 60)
    sign = "-" if minutes < 0 else "+"
    hours, minutes = divmod(abs(minutes), 60)
    return f"{sign}{hours:02d}{':' if colon else ''}{minutes:02d}"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


_FORMATTERS: dict[str, Callable[[datetime], str]] = {
    "YYYY": lambda t: f"{t.year:04d}",
    "YY": lambda t: f"{t.year % 100:02d}",
    "Q": lambda t: str((t.month - 1) // 3 + 1),
    "MMMM": lambda t: calendar.month_name[t.month],
    "MMM": lambda t: calendar.month_abbr[t.month],
    "MM": lambda t: f"{t.month:02d}",
    "Mo": lambda t: _ordinal(t.month),
    "M": lambda t: str(t.month),
    "DDDD": lambda t: f"{t.timetuple().tm_yday:03d}",
    "DDD": lambda t: str(t.timetuple().tm_yday),
    "DD": lambda t: f"{t.day:02d}",
    "Do": lambda t: _ordinal(t.day),
    "D": lambda t: str(t.day),
    "dddd": lambda t: calendar.day_name[t.weekday()],
    "ddd": lambda t: calendar.day_abbr[t.weekday()],
    "dd": lambda t: calendar.day_abbr[t.weekday()][:2],
    "d": lambda t: str((t.weekday() + 1) % 7),
    "E": lambda t: str(t.isoweekday()),
    "HH": lambda t: f"{t.hour:02d}",
    "H": lambda t: str(t.hour),
    "hh": lambda t: f"{(t.hour % 12) or 12:02d}",
    "h": lambda t: str((t.hour % 12) or 12),
    "kk": lambda t: f"{t.hour or 24:02d}",
    "k": lambda t: str(t.hour or 24),
    "mm": lambda t: f"{t.minute:02d}",
    "m": lambda t: str(t.minute),
    "ss": lambda t: f"{t.second:02d}",
    "s": lambda t: str(t.second),
    "SSS": lambda t: f"{t.microsecond // 1000:03d}",
    "SS": lambda t: f"{t.microsecond // 10000:02d}",
    "S": lambda t: str(t.microsecond // 100000),
    "A": lambda t: "AM" if t.hour < 12 else "PM",
    "a": lambda t: "am" if t.hour < 12 else "pm",
    "ZZ": lambda t: _offset_text(t.utcoffset(), colon=False),
    "Z": lambda t: _offset_text(t.utcoffset(), colon=True),
    "X": lambda t: str(int(t.timestamp() // 1)),
    "x": lambda t: str(int(t.timestamp() * 1000 // 1)),
}
"""Moment.js format tokens this subset knows; ``[text]`` is written as it is."""


def format_instant(instant: datetime, pattern: str) -> str:
    """``instant`` written with Moment.js ``pattern``; an unknown token is an error."""
    out: list[str] = []
    pos = 0
    for match in _TOKEN.finditer(pattern):
        out.append(pattern[pos : match.start()])
        token = match.group()
        if token.startswith("["):
            out.append(token[1:-1])
        elif token == "T":  # ISO 8601's date/time separator, as Moment.js writes it
            out.append(token)
        elif token in _FORMATTERS:
            out.append(_FORMATTERS[token](instant))
        else:
            raise InvalidExpression(
                f"moment format: unknown token {token!r} in {pattern!r}"
                " (write literal text in [brackets])"
            )
        pos = match.end()
    out.append(pattern[pos:])
    return "".join(out)


@dataclass(frozen=True)
class Moment:
    """An instant (``at``, aware) shown in ``zone``; every operation returns a new one."""

    at: datetime
    zone: tzinfo

    def local(self) -> datetime:
        """The wall-clock time in the moment's zone."""
        return self.at.astimezone(self.zone)

    def __str__(self) -> str:
        return self.format()

    def to_json(self) -> str:
        """What ``JSON.stringify`` writes: the UTC instant in ISO 8601 with milliseconds."""
        return self.to_iso_string()

    def format(self, pattern: str = ISO_FORMAT) -> str:
        """``format()``: ISO 8601 with the offset, or Moment.js tokens."""
        return format_instant(self.local(), pattern)

    def to_iso_string(self) -> str:
        """``toISOString()``: ``2024-01-31T15:00:00.000Z``."""
        return format_instant(self.at.astimezone(UTC), "YYYY-MM-DD[T]HH:mm:ss.SSS[Z]")

    def unix(self) -> int:
        """``unix()``: whole seconds since the epoch."""
        return int(self.at.timestamp() // 1)

    def value_of(self) -> int:
        """``valueOf()``: milliseconds since the epoch."""
        return int(self.at.timestamp() * 1000 // 1)

    def in_zone(self, name: Any) -> Moment:
        """``tz('Asia/Tokyo')``: the same instant shown in another zone."""
        return Moment(self.at, _zone(name))

    def add(self, amount: Any, unit: Any = None, sign: int = 1) -> Moment:
        """``add(n, 'days')`` (``subtract`` with ``sign=-1``), or ``add({days: n, ...})``."""
        if isinstance(amount, Mapping):
            moved = self
            for key, value in amount.items():
                moved = moved.add(value, key, sign)
            return moved
        if not is_number(amount):
            raise InvalidExpression(f"moment add/subtract needs a number, got {to_text(amount)!r}")
        name = _unit(unit)
        if name in _TIME_UNITS:
            return Moment(self.at + timedelta(seconds=sign * amount * _TIME_UNITS[name]), self.zone)
        if name in _MONTHS_IN:
            return self._shift(months=sign * round(amount * _MONTHS_IN[name]))
        return self._shift(days=sign * round(amount * _DAYS_IN[name]))

    def _shift(self, months: int = 0, days: int = 0) -> Moment:
        wall = self.local().replace(tzinfo=None)
        if abs(months) > MAX_YEAR_STEP * 12 or abs(days) > MAX_YEAR_STEP * 366:
            raise InvalidExpression("moment: the date moves out of range")
        if months:
            index = wall.year * 12 + wall.month - 1 + months
            year, month = divmod(index, 12)
            if not 1 <= year <= 9999:
                raise InvalidExpression("moment: the date moves out of range")
            day = min(wall.day, calendar.monthrange(year, month + 1)[1])
            wall = wall.replace(year=year, month=month + 1, day=day)
        try:
            wall += timedelta(days=days)
        except OverflowError:
            raise InvalidExpression("moment: the date moves out of range") from None
        return self._at_wall(wall)

    def _at_wall(self, wall: datetime) -> Moment:
        # fold=0: a wall time skipped by a DST change lands after the gap, like Moment.js.
        return Moment(wall.replace(tzinfo=self.zone).astimezone(UTC), self.zone)

    def start_of(self, unit: Any) -> Moment:
        """``startOf('month')``: the first instant of the unit, in the moment's zone."""
        name = _unit(unit)
        wall = self.local().replace(tzinfo=None)
        if name == "millisecond":
            return self._at_wall(wall.replace(microsecond=wall.microsecond // 1000 * 1000))
        keep = ("year", "quarter", "month", "week", "isoWeek", "day", "hour", "minute", "second")
        cut = keep.index(name)
        day = date(wall.year, wall.month, wall.day)
        if name == "year":
            day = day.replace(month=1, day=1)
        elif name in ("quarter", "month"):
            month = wall.month if name == "month" else (wall.month - 1) // 3 * 3 + 1
            day = day.replace(month=month, day=1)
        elif name in ("week", "isoWeek"):
            back = (wall.weekday() + 1) % 7 if name == "week" else wall.weekday()
            day -= timedelta(days=back)
        parts = [wall.hour, wall.minute, wall.second]
        fields = [p if i + 6 <= cut else 0 for i, p in enumerate(parts)]
        hour, minute, second = fields
        return self._at_wall(datetime(day.year, day.month, day.day, hour, minute, second))

    def end_of(self, unit: Any) -> Moment:
        """``endOf('month')``: the last millisecond of the unit."""
        start = self.start_of(unit)
        following = start.add(1, "w" if _unit(unit) == "isoWeek" else unit)
        return Moment(following.at - timedelta(milliseconds=1), self.zone)


def _unit(unit: Any) -> str:
    name = _UNIT_OF.get(str(unit)) if isinstance(unit, str) else None
    if name is None:
        known = "years, quarters, months, weeks, days, hours, minutes, seconds, milliseconds"
        raise InvalidExpression(f"moment: unknown unit {to_text(unit)!r} (use one of {known})")
    return name


def _zone_for(parsed: datetime, default_zone: str | None) -> tzinfo:
    """The named zone when it agrees with the parsed offset at that instant, else the offset."""
    if default_zone:
        zone = _zone(default_zone)
        if parsed.astimezone(zone).utcoffset() == parsed.utcoffset():
            return zone
    offset = parsed.utcoffset()
    return UTC if not offset else fixed_zone(offset)


NO_CLOCK = (
    "moment() needs a time: write moment(session_time), or moment(session_time).utc() for "
    "UTC (a task's values never read the clock, so that a rerun of a session sees the same)"
)
"""Why ``moment()`` without a time is refused, and what to write instead."""


def make_moment(args: tuple[Any, ...], default_zone: str | None) -> Moment:
    """``moment(text)``, ``moment(text, format)``, ``moment(milliseconds)`` or a copy.

    Text without an offset is read in ``default_zone`` (the workflow's), or UTC.
    """
    if not args:
        raise InvalidExpression(NO_CLOCK)
    value = args[0]
    if isinstance(value, Moment):
        return value
    zone = _zone(default_zone) if default_zone else UTC
    if is_number(value) and len(args) == 1:
        parsed = datetime.fromtimestamp(value / 1000, UTC)
    elif isinstance(value, str):
        parsed = _parse_text(value, args[1] if len(args) > 1 else None)
    else:
        raise InvalidExpression(f"moment() cannot read {to_text(value)!r}")
    if parsed.tzinfo is None:
        return Moment(parsed.replace(tzinfo=zone).astimezone(UTC), zone)
    return Moment(parsed.astimezone(UTC), _zone_for(parsed, default_zone))


def _parse_text(text: str, pattern: Any) -> datetime:
    if pattern is None:
        try:
            return datetime.fromisoformat(text.strip())
        except ValueError:
            raise InvalidExpression(f"moment() cannot read {text!r} as an ISO 8601 time") from None
    regex, names = _pattern_regex(to_text(pattern))
    match = re.fullmatch(regex, text.strip())
    if match is None:
        raise InvalidExpression(f"moment(): {text!r} does not match the format {pattern!r}")
    values = {"year": 1970, "month": 1, "day": 1, "hour": 0, "minute": 0, "second": 0}
    values.update({name: int(match.group(i + 1)) for i, name in enumerate(names)})
    v = values
    try:
        return datetime(
            v["year"],
            v["month"],
            v["day"],
            v["hour"],
            v["minute"],
            v["second"],
            v.get("millisecond", 0) * 1000,
        )
    except ValueError as exc:
        raise InvalidExpression(f"moment(): {text!r} is not a valid time: {exc}") from None


def _pattern_regex(pattern: str) -> tuple[str, list[str]]:
    regex: list[str] = []
    names: list[str] = []
    pos = 0
    for match in _PARSE_TOKEN.finditer(pattern):
        regex.append(re.escape(pattern[pos : match.start()]))
        token = match.group()
        if token.startswith("["):
            regex.append(re.escape(token[1:-1]))
        elif token in _PARSE_FIELDS:
            name, digits = _PARSE_FIELDS[token]
            regex.append(f"({digits})")
            names.append(name)
        else:
            known = ", ".join(_PARSE_FIELDS)
            raise InvalidExpression(
                f"moment(): unknown parse token {token!r} in {pattern!r} (use {known})"
            )
        pos = match.end()
    regex.append(re.escape(pattern[pos:]))
    return "".join(regex), names
