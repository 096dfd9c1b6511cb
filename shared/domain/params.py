"""Which parameters a task sees, in Digdag's merge order, and the built-in variables."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo


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
    local = session_time.astimezone(ZoneInfo(timezone))
    return {
        "timezone": timezone,
        "session_time": local.isoformat(),
        "session_date": local.strftime("%Y-%m-%d"),
        "session_date_compact": local.strftime("%Y%m%d"),
        "session_local_time": local.strftime("%Y-%m-%d %H:%M:%S"),
        "session_tz_offset": local.strftime("%z"),
        "session_unixtime": int(session_time.timestamp()),
    }


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
