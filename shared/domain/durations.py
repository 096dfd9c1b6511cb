"""Durations as users write them: ``90``, ``"30s"``, ``"10m"``, ``"1h30m"``, ``"2d"``."""

from __future__ import annotations

import re
from typing import Any

from tickwork.shared.errors import InvalidValue

UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_DURATION = re.compile(r"\A(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?\Z")


class BadDuration(InvalidValue):
    """Raised for a value that is not a duration, or one out of range; the message says what
    was expected."""


def parse_duration(value: Any, *, maximum: int | None = None, minimum: int = 0) -> int:
    """Whole seconds in ``value``: an integer of seconds or a string like ``1h30m``.

    Raises :class:`BadDuration` for anything else, or for a value outside
    ``minimum..maximum`` seconds.
    """
    if isinstance(value, bool):
        raise BadDuration(f"expected a duration such as 30s, 10m or 1h30m, got {value!r}")
    if isinstance(value, int):
        seconds = value
    elif isinstance(value, str):
        seconds = _parse_text(value)
    else:
        raise BadDuration(f"expected a duration such as 30s, 10m or 1h30m, got {value!r}")
    if seconds < minimum:
        raise BadDuration(f"must be at least {format_duration(minimum)}, got {value!r}")
    if maximum is not None and seconds > maximum:
        raise BadDuration(f"must be at most {format_duration(maximum)}, got {value!r}")
    return seconds


def _parse_text(text: str) -> int:
    compact = text.strip().replace(" ", "").lower()
    if compact.isdigit():
        return int(compact)
    match = _DURATION.fullmatch(compact)
    if not compact or match is None:
        raise BadDuration(f"expected a duration such as 30s, 10m or 1h30m, got {text!r}")
    return sum(int(n) * unit for n, unit in zip(match.groups(), UNITS.values(), strict=True) if n)


def format_duration(seconds: int) -> str:
    """The shortest ``1d2h3m4s`` spelling of ``seconds`` (``0s`` for zero)."""
    if seconds == 0:
        return "0s"
    parts = []
    for suffix, unit in UNITS.items():
        count, seconds = divmod(seconds, unit)
        if count:
            parts.append(f"{count}{suffix}")
    return "".join(parts)
