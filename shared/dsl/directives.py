"""Checking the values of directives (``_parallel``, ``_retry``, delays, ``_after`` cycles)."""

from __future__ import annotations

from typing import Any

from tickwork.shared.domain.delays import BadStartAt, parse_start_at
from tickwork.shared.domain.durations import BadDuration, parse_duration
from tickwork.shared.domain.numbers import decimal_number, whole_number
from tickwork.shared.domain.schedule import suggest
from tickwork.shared.domain.workflow import MAX_INTERVAL_SECONDS, IntervalType, RetryPolicy
from tickwork.shared.dsl.loader import LineMap

RETRY_OPTIONS = ("limit", "interval", "interval_type", "max_interval")
MAX_PARALLEL_LIMIT = 10_000
MAX_RETRY_LIMIT = 1_000


def flag(value: Any) -> bool | None:
    """``true``/``false`` (YAML booleans or those strings, as Digdag accepts), else None."""
    if isinstance(value, bool):
        return value
    return {"true": True, "false": False}.get(value) if isinstance(value, str) else None


class Bad(Exception):
    """A directive's value is wrong: ``message``, at ``line``."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(message)
        self.message = message
        self.line = line


def count(value: Any) -> int | None:
    """A whole number >= 0, written as a number or a string (``3``, ``"3"``), else None."""
    number = whole_number(value)
    return number if number is not None and number >= 0 else None


def parallel_value(value: Any, line: int) -> tuple[bool, int | None]:
    """``_parallel``: true/false (or their strings), or ``{limit: N}`` with N >= 1."""
    if flag(value) is not None:
        return bool(flag(value)), None
    if not isinstance(value, LineMap) or set(value) != {"limit"}:
        raise Bad(f"'_parallel' must be true, false or {{limit: N}}, got {value!r}", line)
    limit = count(value["limit"])
    if limit is None or not 1 <= limit <= MAX_PARALLEL_LIMIT:
        message = f"'_parallel' limit must be a whole number from 1 to {MAX_PARALLEL_LIMIT}"
        raise Bad(f"{message}, got {value['limit']!r}", value.line_of("limit"))
    return True, limit


def retry_policy(value: Any, line: int) -> RetryPolicy:
    """``_retry``: a count, or ``{limit, interval, interval_type, max_interval}``."""
    if "${" in repr(value):  # a retry policy is fixed when the workflow is pushed
        raise Bad("'_retry' cannot use ${...} expressions", line)
    scalar = count(value)
    if scalar is not None and scalar <= MAX_RETRY_LIMIT:
        return RetryPolicy(limit=scalar)
    if not isinstance(value, LineMap):
        expected = f"a whole number from 0 to {MAX_RETRY_LIMIT} or {{limit: N, ...}}"
        raise Bad(f"'_retry' must be {expected}, got {value!r}", line)
    for key in value:
        if key not in RETRY_OPTIONS:
            hint = suggest(str(key), RETRY_OPTIONS)
            raise Bad(f"unknown '_retry' option '{key}'{hint}", value.line_of(key))
    limit = count(value.get("limit"))
    if limit is None or limit > MAX_RETRY_LIMIT:
        message = f"'_retry' limit must be a whole number from 0 to {MAX_RETRY_LIMIT}"
        raise Bad(f"{message}, got {value.get('limit')!r}", value.line_of("limit"))
    interval_type = value.get("interval_type", "constant")
    if interval_type not in tuple(IntervalType):
        message = f"'_retry' interval_type must be constant or exponential, got {interval_type!r}"
        raise Bad(message, value.line_of("interval_type"))
    interval, maximum = _seconds(value, "interval") or 0.0, _seconds(value, "max_interval")
    return RetryPolicy(limit, interval, IntervalType(interval_type), maximum)


def _seconds(value: LineMap, key: str) -> float | None:
    """A ``_retry`` interval: seconds (fractions allowed, ``"10"`` too) or a duration such
    as ``10m``."""
    seconds = value.get(key)
    if seconds is None:
        return None
    number = decimal_number(seconds)
    if number is not None and 0 <= number <= MAX_INTERVAL_SECONDS:
        return number
    if number is None and isinstance(seconds, str):
        try:
            return float(parse_duration(seconds, maximum=MAX_INTERVAL_SECONDS))
        except BadDuration:
            pass
    message = (
        f"'_retry' {key} must be from 0 to {MAX_INTERVAL_SECONDS} seconds or a duration such as 10m"
    )
    raise Bad(f"{message}, got {seconds!r}", value.line_of(key))


def delay_seconds(value: Any, line: int) -> int:
    """``_delay``: whole seconds or a duration such as ``1h30m``, at most a week."""
    _no_expression("_delay", value, line)
    try:
        return parse_duration(value, maximum=MAX_INTERVAL_SECONDS)
    except BadDuration as exc:
        raise Bad(f"'_delay' {exc}", line) from None


def start_at(value: Any, line: int) -> str:
    """``_start_at``: a wall time ``HH:MM[:SS]`` or an ISO 8601 instant with an offset."""
    _no_expression("_start_at", value, line, " (07:00 means 07:00 on the session's date)")
    try:
        return parse_start_at(value)
    except BadStartAt as exc:
        raise Bad(f"'_start_at' {exc}", line) from None


def _no_expression(key: str, value: Any, line: int, hint: str = "") -> None:
    # The time is decided when the task becomes ready, before any of its params exist.
    if isinstance(value, str) and "${" in value:
        raise Bad(f"'{key}' cannot use ${{...}} expressions{hint}", line)


def find_cycle(graph: dict[str, list[str]]) -> list[str]:
    """One cycle of ``graph`` (task -> the tasks it runs after), or ``[]``."""
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> list[str]:
        if state.get(node) == "open":
            return path[path.index(node) :]
        if state.get(node) == "done":
            return []
        state[node] = "open"
        for upstream in graph[node]:
            if cycle := visit(upstream, [*path, node]):
                return cycle
        state[node] = "done"
        return []

    for start in graph:
        if cycle := visit(start, []):
            return cycle
    return []
