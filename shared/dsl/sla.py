"""Checking a workflow's top-level ``sla:`` and turning it into a :class:`SlaSpec`."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import time
from typing import Any

from tickwork.shared.domain.durations import BadDuration, format_duration, parse_duration
from tickwork.shared.domain.schedule import suggest
from tickwork.shared.domain.sla import SlaSpec
from tickwork.shared.domain.workflow import TaskSpec
from tickwork.shared.dsl.directives import flag
from tickwork.shared.dsl.loader import LineMap

SLA_OPTIONS = ("time", "duration", "alert", "fail")
MAX_SLA_SECONDS = 31 * 24 * 3600
_CLOCK = re.compile(r"\A(\d{1,2}):(\d{2})(?::(\d{2}))?\Z")  # HH:MM[:SS]

Report = Callable[[int, str], None]
"""Records a problem: its line and message."""

ParseTasks = Callable[[LineMap], TaskSpec]
"""Parses the ``+tasks`` of ``sla:`` (given as a mapping of only them) into one group."""


def read_sla(value: Any, line: int, report: Report, parse_tasks: ParseTasks) -> SlaSpec | None:
    """The ``sla:`` at ``line``, or None after reporting every problem in it.

    Options are Digdag's: exactly one of ``time: HH:MM[:SS]`` and ``duration`` (Digdag's
    ``HH:MM[:SS]``, or ``1h30m``, or seconds), ``alert`` (default true), ``fail`` (default
    false), and ``+tasks`` to run when the SLA is missed.
    """
    if not isinstance(value, LineMap):
        report(line, f"'sla' must be a mapping such as {{time: '02:00'}}, got {value!r}")
        return None
    problems = _Counter(report)
    tasks = LineMap(value.line)
    for key, item in value.items():
        if isinstance(key, str) and key.startswith("+"):
            tasks[key] = item
            tasks.key_lines[key] = value.line_of(key)
        elif key not in SLA_OPTIONS:
            hint = suggest(str(key), (*SLA_OPTIONS, "+task"))
            problems(value.line_of(key), f"unknown 'sla' option '{key}'{hint}")
    spec = SlaSpec(
        time=_time(value, problems),
        duration_seconds=_duration(value, problems),
        alert=_flag(value, "alert", True, problems),
        fail=_flag(value, "fail", False, problems),
        tasks=parse_tasks(tasks) if tasks else None,
    )
    if ("time" in value) == ("duration" in value):
        problems(line, "'sla' needs either 'time: HH:MM' or 'duration' (one, not both)")
    return None if problems.count else spec


class _Counter:
    """A :data:`Report` that counts what it passes on."""

    def __init__(self, report: Report) -> None:
        self.report = report
        self.count = 0

    def __call__(self, line: int, message: str) -> None:
        self.count += 1
        self.report(line, message)


def _clock(text: str) -> tuple[int, int, int] | None:
    match = _CLOCK.fullmatch(text.strip())
    if match is None:
        return None
    hours, minutes, seconds = (int(part or 0) for part in match.groups())
    return hours, minutes, seconds


def _time(value: LineMap, report: Report) -> str | None:
    if "time" not in value:
        return None
    raw = value["time"]
    parts = _clock(raw) if isinstance(raw, str) else None
    if parts is None or parts[0] > 23 or parts[1] > 59 or parts[2] > 59:
        message = "'sla' time must be a time of day HH:MM or HH:MM:SS (quote it)"
        report(value.line_of("time"), f"{message}, got {raw!r}")
        return None
    return time(*parts).isoformat()


def _duration(value: LineMap, report: Report) -> int | None:
    if "duration" not in value:
        return None
    raw = value["duration"]
    parts = _clock(raw) if isinstance(raw, str) else None
    try:
        if parts is not None and parts[1] <= 59 and parts[2] <= 59:
            seconds = parts[0] * 3600 + parts[1] * 60 + parts[2]
            return parse_duration(seconds, minimum=1, maximum=MAX_SLA_SECONDS)
        return parse_duration(raw, minimum=1, maximum=MAX_SLA_SECONDS)
    except BadDuration as exc:
        longest = format_duration(MAX_SLA_SECONDS)
        message = f"'sla' duration must be HH:MM[:SS] or a duration such as 1h30m (1s to {longest})"
        report(value.line_of("duration"), f"{message}: {exc}")
    return None


def _flag(value: LineMap, key: str, default: bool, report: Report) -> bool:
    if key not in value:
        return default
    parsed = flag(value[key])
    if parsed is None:
        report(value.line_of(key), f"'sla' {key} must be true or false, got {value[key]!r}")
        return default
    return parsed
