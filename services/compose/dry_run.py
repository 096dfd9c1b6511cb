"""``tickwork run --dry-run`` and ``--show-params``: the tasks a run would go through, in
order, and the params each would see, without running anything.

The tree is the workflow file's: what a task adds while it runs (a loop's iterations, a
``py>`` task's subtasks, ``http_call>``'s workflow) is shown as the body it repeats or not
at all. Params are merged as the executor merges them (shared/domain/params.py): session
params, the enclosing groups' ``_export``, the task's own ``_export``, the built-in
variables and its own keys. What earlier tasks would store is unknown before they run, so a
``${...}`` that needs it is shown as written.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

from tickwork.shared.domain.expressions import render
from tickwork.shared.domain.params import (
    merge_params,
    schedule_variables,
    session_variables,
    task_params,
)
from tickwork.shared.domain.schedule import ScheduleSpec
from tickwork.shared.domain.workflow import TaskSpec, WorkflowDefinition
from tickwork.shared.errors import TickworkError

INDENT = "  "


def dry_run_lines(
    definition: WorkflowDefinition,
    session_time: datetime,
    params: Mapping[str, Any],
    *,
    show_params: bool,
) -> Iterator[str]:
    """One line per task, indented by depth (``+wf+step  sh>: make``); with
    ``show_params``, the params each operator task would see after it, as JSON."""
    timezone = definition.timezone
    builtins: dict[str, Any] = {
        **session_variables(session_time, timezone),
        "workflow_name": definition.name,
        "retry_attempt_name": None,
    }
    if definition.schedule is not None:
        schedule = ScheduleSpec.from_config(definition.schedule)
        builtins.update(schedule_variables(schedule, session_time, timezone))
    yield from _task_lines(definition.root, "", 0, dict(params), {}, builtins, show_params)


def _task_lines(
    spec: TaskSpec,
    prefix: str,
    depth: int,
    session_params: dict[str, Any],
    inherited: dict[str, Any],
    builtins: dict[str, Any],
    show_params: bool,
) -> Iterator[str]:
    full_name = prefix + spec.name
    indent = INDENT * depth
    yield f"{indent}{full_name}  {_what(spec)}"
    if show_params and spec.operator is not None:
        seen = task_params(
            session_params=session_params,
            inherited_export=inherited,
            stored=None,
            own_export=spec.export,
            builtins={**builtins, "task_name": full_name, "retry": 0},
            local=spec.params,
        )
        yield f"{indent}{INDENT}params: {json.dumps(_rendered(seen), sort_keys=True, default=str)}"
    exported = merge_params(inherited, spec.export)
    for child in (*spec.children, *(c for c in (spec.do, spec.else_do, spec.called) if c)):
        yield from _task_lines(
            child, full_name, depth + 1, session_params, exported, builtins, show_params
        )


def _what(spec: TaskSpec) -> str:
    if spec.operator is None:
        return "(group, parallel)" if spec.parallel else "(group)"
    command = "" if spec.command is None else f" {json.dumps(spec.command, default=str)}"
    return f"{spec.operator}>:{command}"


def _rendered(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with their ``${...}`` evaluated; each value that needs what is unknown
    before the run (a stored param) is left as written."""
    shown: dict[str, Any] = {}
    for key, value in params.items():
        try:
            shown[key] = render(value, params)
        except TickworkError:
            shown[key] = value
    return shown
