"""Which project a thing of the store belongs to, by the id a path names it with: an
attempt, a session, a schedule or a workflow definition. The API asks before a token
limited to projects may see or change one (services/api/scope.py), and the audit log
names the project of the change."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from sqlalchemy import ColumnElement, Connection, Select, select, true

from tickwork.shared.store.tables import (
    attempts,
    projects,
    revisions,
    schedules,
    sessions,
    workflow_definitions,
)


def _of_attempt(attempt_id: int) -> Select[Any]:
    return (
        select(projects.c.name)
        .join(sessions, sessions.c.project_id == projects.c.id)
        .join(attempts, attempts.c.session_id == sessions.c.id)
        .where(attempts.c.id == attempt_id)
    )


def _of_session(session_id: int) -> Select[Any]:
    return (
        select(projects.c.name)
        .join(sessions, sessions.c.project_id == projects.c.id)
        .where(sessions.c.id == session_id)
    )


def _of_schedule(schedule_id: int) -> Select[Any]:
    return (
        select(projects.c.name)
        .join(schedules, schedules.c.project_id == projects.c.id)
        .where(schedules.c.id == schedule_id)
    )


def _of_workflow(definition_id: int) -> Select[Any]:
    return (
        select(projects.c.name)
        .join(revisions, revisions.c.project_id == projects.c.id)
        .join(workflow_definitions, workflow_definitions.c.revision_id == revisions.c.id)
        .where(workflow_definitions.c.id == definition_id)
    )


OWNER_QUERIES: Mapping[str, Callable[[int], Select[Any]]] = {
    "attempt_id": _of_attempt,
    "session_id": _of_session,
    "schedule_id": _of_schedule,
    "workflow_id": _of_workflow,
}
"""The query of the project's name, by the name of the path argument holding the id."""


def project_of(conn: Connection, argument: str, value: int) -> str | None:
    """The name of the project of the thing whose id ``value`` is given as ``argument``
    (one of :data:`OWNER_QUERIES`); None when there is no such thing."""
    name = conn.execute(OWNER_QUERIES[argument](value)).scalar_one_or_none()
    return str(name) if name is not None else None


def in_projects(
    column: ColumnElement[int], project_ids: Collection[int] | None
) -> ColumnElement[bool]:
    """The condition keeping rows whose project id (``column``) is one of ``project_ids``;
    None keeps every row (a reader not limited to projects), an empty set none."""
    if project_ids is None:
        return true()
    return column.in_(sorted(project_ids))
