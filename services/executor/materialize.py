"""Turning task specs into task rows: an attempt's static tree, or subtasks generated later."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, select

from tickwork.shared.domain.operators import agent_operators
from tickwork.shared.domain.params import merge_params
from tickwork.shared.domain.states import TaskState
from tickwork.shared.domain.workflow import TaskSpec, sibling_dependencies
from tickwork.shared.store.tables import attempts, tasks
from tickwork.shared.store.tasks import insert_dependencies, insert_tasks

AGENT_OPERATORS = agent_operators()
"""Operators an agent runs: only their tasks take a slot of their ``_pool``."""

SKIPPED: dict[str, Any] = {"skipped": True}
"""The result of a task done without running (``tickwork run --end``/``--goal``)."""


@dataclass(frozen=True)
class Placement:
    """Where new rows go: their attempt, parent, and the exports they inherit."""

    attempt_id: int
    parent_id: int | None
    parent_full_name: str
    inherited_export: dict[str, Any] | None
    generated: bool
    resume_from_attempt_id: int | None = None
    first_position: int = 0  # generated children go after the existing ones
    skip_tasks: frozenset[str] = frozenset()  # done without running (`run --end/--goal`)


def materialize_children(
    conn: Connection,
    placement: Placement,
    specs: Sequence[TaskSpec],
    edges: Sequence[tuple[int, int]],
    now: datetime,
) -> list[int]:
    """Insert ``specs`` (and their static subtrees) as BLOCKED siblings; returns their ids.

    ``edges`` are dependencies among ``specs`` by index. Tasks that succeeded in the attempt
    being resumed are inserted as SUCCESS with the params they stored.
    """
    names = [placement.parent_full_name + spec.name for spec in specs]
    resumed = _resumed_outputs(conn, placement, names)
    rows = [
        _row(placement, spec, name, placement.first_position + index, resumed, now)
        for index, (spec, name) in enumerate(zip(specs, names, strict=True))
    ]
    ids = insert_tasks(conn, rows)
    insert_dependencies(conn, [(ids[up], ids[down]) for up, down in edges])
    # A resumed group gets its children's rows too (resumed as well): a retry of an
    # enclosing group resets them and runs them again.
    for task_id, spec, name in zip(ids, specs, names, strict=True):
        if spec.children:
            child_placement = Placement(
                attempt_id=placement.attempt_id,
                parent_id=task_id,
                parent_full_name=name,
                inherited_export=_inherit(placement.inherited_export, spec.export),
                generated=placement.generated,
                resume_from_attempt_id=placement.resume_from_attempt_id,
                skip_tasks=placement.skip_tasks,
            )
            materialize_children(
                conn, child_placement, spec.children, sibling_dependencies(spec), now
            )
    return ids


def _inherit(inherited: dict[str, Any] | None, export: dict[str, Any]) -> dict[str, Any] | None:
    """What a group's children inherit: the enclosing exports, then the group's own."""
    if not export:
        return inherited
    return merge_params(inherited, export) or None


def _row(
    placement: Placement,
    spec: TaskSpec,
    full_name: str,
    position: int,
    resumed: dict[str, tuple[dict[str, Any] | None, dict[str, Any] | None]],
    now: datetime,
) -> dict[str, Any]:
    done = full_name in resumed
    result, output = resumed.get(full_name, (None, None))
    return {
        "attempt_id": placement.attempt_id,
        "parent_id": placement.parent_id,
        "full_name": full_name,
        "position": position,
        "is_group": spec.is_group,
        "is_generated": placement.generated,
        "state": (TaskState.SUCCESS if done else TaskState.BLOCKED).value,
        "config": spec.to_config(with_children=False),
        "inherited_export": placement.inherited_export,
        "retry_count": 0,
        "lease_token": 0,
        "not_before": None,
        "pool": spec.pool if spec.operator in AGENT_OPERATORS else None,
        "priority": spec.priority or 0,
        "params": None,
        "result": {**(result or {}), "resumed": True} if done else None,
        "output_params": output,
        "error": None,
        "created_at": now,
        "started_at": None,
        "finished_at": now if done else None,
        "updated_at": now,
    }


def _resumed_outputs(
    conn: Connection, placement: Placement, names: list[str]
) -> dict[str, tuple[dict[str, Any] | None, dict[str, Any] | None]]:
    """``full name -> (result, output_params)`` of the tasks that succeeded in the attempt
    being resumed; only those the new attempt's ``resume_only`` names, when it has one (a
    retry from a task)."""
    attempt_id = placement.resume_from_attempt_id
    # `tickwork run --end/--goal`: these are done without running, as Digdag's run skips.
    skipped: dict[str, tuple[dict[str, Any] | None, dict[str, Any] | None]] = {
        name: (SKIPPED, None) for name in names if name in placement.skip_tasks
    }
    names = [name for name in names if name not in skipped]
    if attempt_id is None or not names:
        return skipped
    only_query = select(attempts.c.resume_only).where(attempts.c.id == placement.attempt_id)
    only = conn.execute(only_query).scalar_one_or_none()
    if only is not None:
        kept = set(only)
        names = [name for name in names if name in kept]
        if not names:
            return skipped
    query = select(tasks.c.full_name, tasks.c.result, tasks.c.output_params).where(
        tasks.c.attempt_id == attempt_id,
        tasks.c.full_name.in_(names),
        tasks.c.state == TaskState.SUCCESS.value,
    )
    found = {str(name): (result, output) for name, result, output in conn.execute(query)}
    return {**found, **skipped}
