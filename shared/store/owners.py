"""Which project a thing of the store belongs to, by the id a path names it with: an
attempt, a session, a schedule or a workflow definition. The API asks before a token
limited to projects may see or change one (services/api/scope.py), and the audit log
names the project of the change."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from sqlalchemy import BindParameter, ColumnElement, Connection, Select, bindparam, select, true

from tickwork.shared.store.tables import (
    attempts,
    notification_deliveries,
    projects,
    revisions,
    schedules,
    sessions,
    triggers,
    workflow_definitions,
)

_NAME = select(projects.c.name)
_IN_SESSION = _NAME.join(sessions, sessions.c.project_id == projects.c.id)
_ID: BindParameter[int] = bindparam("id")

OWNER_QUERIES: Mapping[str, Select[Any]] = {
    "attempt_id": _IN_SESSION.join(attempts, attempts.c.session_id == sessions.c.id).where(
        attempts.c.id == _ID
    ),
    "session_id": _IN_SESSION.where(sessions.c.id == _ID),
    "schedule_id": _NAME.join(schedules, schedules.c.project_id == projects.c.id).where(
        schedules.c.id == _ID
    ),
    "workflow_id": _NAME.join(revisions, revisions.c.project_id == projects.c.id)
    .join(workflow_definitions, workflow_definitions.c.revision_id == revisions.c.id)
    .where(workflow_definitions.c.id == _ID),
    "delivery_id": _NAME.join(
        notification_deliveries, notification_deliveries.c.project_id == projects.c.id
    ).where(notification_deliveries.c.id == _ID),
    "trigger_id": _NAME.join(triggers, triggers.c.project_id == projects.c.id).where(
        triggers.c.id == _ID
    ),
}
"""The query of the project's name, by the name of the path argument holding the id
(bound as ``id``); each made once."""


def project_of(conn: Connection, argument: str, value: int) -> str | None:
    """The name of the project of the thing whose id ``value`` is given as ``argument``
    (one of :data:`OWNER_QUERIES`); None when there is no such thing."""
    name = conn.execute(OWNER_QUERIES[argument], {"id": value}).scalar_one_or_none()
    return str(name) if name is not None else None


def in_projects(
    column: ColumnElement[int], project_ids: Collection[int] | None
) -> ColumnElement[bool]:
    """The condition keeping rows whose project id (``column``) is one of ``project_ids``;
    None keeps every row (a reader not limited to projects), an empty set none."""
    if project_ids is None:
        return true()
    return column.in_(sorted(project_ids))
