"""Which parameters a task sees, in Digdag's merge order, and the built-in variables."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from tickwork.shared.domain.schedule import ScheduleSpec


def merge_params(*layers: Mapping[str, Any] | None) -> dict[str, Any]:
    """Merge layers lowest first; nested dicts merge key by key, anything else replaces."""
    merged: dict[str, Any] = {}
    for layer in layers:
        if layer:
            _merge_into(merged, layer)
    return merged


def _merge_into(target: dict[str, Any], layer: Mapping[str, Any]) -> None:
    for key, value in layer.items():
        current = target.get(key)
        if isinstance(current, dict) and isinstance(value, Mapping):
            merged = dict(current)
            _merge_into(merged, value)
            target[key] = merged
        else:
            target[key] = value


def merge_outputs(outputs: Iterable[Mapping[str, Any] | None]) -> dict[str, Any] | None:
    """Join stored params of tasks in definition order (the last defined wins); None if empty."""
    merged = merge_params(*outputs)
    return merged or None


def session_variables(session_time: datetime, timezone: str) -> dict[str, Any]:
    """``session_time`` and friends, written in the workflow's time zone as Digdag does."""
    return {"timezone": timezone, **time_variables("session", session_time, timezone)}


def time_variables(prefix: str, instant: datetime, timezone: str) -> dict[str, Any]:
    """``<prefix>_time`` and its ``_date``, ``_date_compact``, ``_local_time``,
    ``_tz_offset`` and ``_unixtime`` variants, in the workflow's time zone."""
    local = instant.astimezone(ZoneInfo(timezone))
    return {
        f"{prefix}_time": local.isoformat(),
        f"{prefix}_date": local.strftime("%Y-%m-%d"),
        f"{prefix}_date_compact": local.strftime("%Y%m%d"),
        f"{prefix}_local_time": local.strftime("%Y-%m-%d %H:%M:%S"),
        f"{prefix}_tz_offset": local.strftime("%z"),
        f"{prefix}_unixtime": int(instant.timestamp()),
    }


def schedule_variables(
    schedule: ScheduleSpec, session_time: datetime, timezone: str
) -> dict[str, Any]:
    """``last_session_*`` and ``next_session_*``: the schedule's slots before and after the
    session time, whether or not sessions ran then (Digdag's rule)."""
    variables: dict[str, Any] = {}
    before = schedule.last_session_time(session_time - timedelta(microseconds=1))
    after = schedule.next_session_time(session_time)
    for prefix, instant in (("last_session", before), ("next_session", after)):
        if instant is not None:
            variables.update(time_variables(prefix, instant, timezone))
    return variables


def task_params(
    *,
    session_params: Mapping[str, Any],
    inherited_export: Mapping[str, Any] | None,
    stored: Mapping[str, Any] | None,
    own_export: Mapping[str, Any] | None,
    builtins: Mapping[str, Any],
    local: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """All params of one task, before ``${...}`` evaluation.

    Lowest first: session params (``--param``), the enclosing groups' ``_export``, params
    stored by earlier tasks, the task's own ``_export``, built-in variables, local keys.
    """
    return merge_params(session_params, inherited_export, stored, own_export, builtins, local)
